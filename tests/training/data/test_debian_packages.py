"""The package-description dataset: dpkg's status stanzas read as synopsis → description pairs, seeded."""

from __future__ import annotations

import pytest

from tests.training.data.built_dataset import seeded_disjoint_identical
from training.data.debian_packages import build_packages_dataset, harvest, parse_description

CURL = """Package: curl
Status: install ok installed
Priority: optional
Version: 7.88.1-10
Description: command line tool for transferring data with URL syntax
 curl is a client to get files from servers using any of the supported protocols,
 DICT, FILE, FTP, FTPS, GOPHER, HTTP, HTTPS and more.
 .
 curl supports SSL certificates, HTTP POST, HTTP PUT, FTP uploading.
Homepage: https://curl.se
"""


def _stanza(name: str, synopsis: str, words: int = 20, status: str = "install ok installed") -> str:
    body = " ".join(f"{name}word{i}" for i in range(words))
    return f"Package: {name}\nStatus: {status}\nDescription: {synopsis}\n {body}\n .\n more about {name}\n"


def test_a_description_gives_its_synopsis_and_its_extended_text_as_one_line():
    stanza = CURL.split("Description: ", 1)[1].split("\nHomepage", 1)[0]
    synopsis, body = parse_description(stanza)
    assert synopsis == "command line tool for transferring data with URL syntax"
    assert body.startswith(
        "curl is a client to get files from servers using any of the supported protocols, DICT"
    )
    assert "and more. curl supports SSL" in body  # the " ." paragraph break is a space, not a dot
    assert "Homepage" not in body


def _status(tmp_path, n=40):
    stanzas = [CURL] + [_stanza(f"pkg{i}", f"tool number {i} for things") for i in range(n)]
    stanzas += [
        _stanza("dup", "tool number 3 for things"),  # duplicate synopsis: the first kept
        _stanza("short", "a short one", words=5),
        _stanza("gone", "removed but configured", status="deinstall ok config-files"),
        "Package: nolong\nStatus: install ok installed\nDescription: no extended description\n",
        _stanza("oldname", "transitional package for newname"),
    ]
    path = tmp_path / "status"
    path.write_text("\n".join(stanzas))
    return path


def test_harvest_keeps_each_usable_installed_package_once(tmp_path):
    pairs = harvest(_status(tmp_path))
    names = [p.name for p in pairs]
    assert names[0] == "curl" and len(pairs) == 41 and len(set(names)) == 41
    assert "pkg3" in names
    assert not {"dup", "short", "gone", "nolong", "oldname"} & set(names)


def test_a_description_that_repeats_its_synopsis_is_dropped(tmp_path):
    path = tmp_path / "status"
    path.write_text(
        _stanza("echo", "echoword1 echoword2") + "\n" + _stanza("pkg0", "something else entirely")
    )
    assert [p.name for p in harvest(path)] == ["pkg0"]  # the query would be a substring of its answer


def test_the_dataset_is_seeded_disjoint_and_byte_identical(tmp_path):
    status = _status(tmp_path)
    doc = seeded_disjoint_identical(build_packages_dataset, tmp_path, status=status)
    other = build_packages_dataset(tmp_path / "c", n_docs=30, n_test=10, seed=2, status=status)
    assert (tmp_path / "a/qrels/test.tsv").read_bytes() != (other / "qrels/test.tsv").read_bytes()
    assert doc["title"].startswith(("pkg", "curl")) and doc["text"].startswith(("pkg", "curl"))


def test_a_missing_status_file_says_so(tmp_path):
    with pytest.raises(FileNotFoundError, match="no dpkg status file"):
        build_packages_dataset(tmp_path / "out", status=tmp_path / "nothing")
