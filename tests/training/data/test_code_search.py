"""The code-search dataset: a function's docstring summary finds its code, docstring removed, seeded."""

from __future__ import annotations

import ast

import pytest

from tests.training.data.built_dataset import seeded_disjoint_identical
from training.data.code_search import build_code_dataset, function_code, harvest

SOURCE = '''
class Queue:
    @property
    def size(self):
        """Return the number of items in the queue.

        Not reliable across threads.
        """
        with self.mutex:
            n = len(self.items)
        return n
'''


def test_the_document_is_the_code_without_its_docstring():
    tree = ast.parse(SOURCE)
    node = tree.body[0].body[0]
    code = function_code(node, SOURCE.splitlines())
    assert code.splitlines()[:2] == ["@property", "def size(self):"]  # decorator kept, dedented
    assert "Return the number" not in code and "Not reliable" not in code
    assert code.endswith("return n")


def _function(i: int, statements: int = 6) -> str:
    body = "\n".join(f"    value{j} = helper{i}(value{j - 1 if j else 0}, {j})" for j in range(statements))
    return f'def work{i}(value0):\n    """Compute the widget number {i} from a value."""\n{body}\n    return value0\n'


def _stdlib(root, n=40):
    (root / "pkg").mkdir(parents=True)
    (root / "test").mkdir()
    (root / "pkg" / "__init__.py").write_text("\n".join(_function(i) for i in range(n)))
    extra = [
        _function(3).replace("def work3", "def again"),  # duplicate summary: the first kept
        'def stub():\n    """Return a value that is short."""\n    return 1\n',  # too little code
        'def _private():\n    """A private helper that does things."""\n' + "    x = 1\n" * 20,
    ]
    (root / "pkg" / "more.py").write_text("\n".join(extra))
    (root / "test" / "test_x.py").write_text(_function(99))  # tests are skipped
    (root / "broken.py").write_text("def (:\n")  # unparsable: skipped
    return root


def test_harvest_keeps_each_usable_public_function_once(tmp_path):
    pairs = harvest(_stdlib(tmp_path / "lib"))
    names = [p.name for p in pairs]
    assert len(pairs) == 40 and names[3] == "pkg.work3"
    assert not {"pkg.more.again", "pkg.more.stub", "pkg.more._private", "test.test_x.work99"} & set(names)
    assert all(p.summary not in p.body for p in pairs)


def test_the_dataset_is_seeded_disjoint_and_byte_identical(tmp_path):
    doc = seeded_disjoint_identical(build_code_dataset, tmp_path, root=_stdlib(tmp_path / "lib"))
    assert doc["title"].startswith("pkg.work") and doc["text"].startswith("def work")


def test_a_missing_source_says_so(tmp_path):
    with pytest.raises(FileNotFoundError, match="no Python standard library"):
        build_code_dataset(tmp_path / "out", root=tmp_path / "nothing")
