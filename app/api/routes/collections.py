"""GET/POST /collections, GET/DELETE /collections/{collection}, and the aliases: GET /aliases,
GET/PUT/DELETE /aliases/{alias}.

What a collection is and where it lives: contract/bundles/collections.py; what this process has loaded:
app/live/collections.py; everything a collection serves (search, documents, bundles, jobs …) is under
/collections/{collection}/ (app/api/collection_scope.py). Creating, deleting and re-pointing need the API
key; reading is public, like GET /bundles.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from fastapi import APIRouter

from app.api.collection_scope import CollectionPath
from app.api.deps import ApiKeyDep, CollectionsDep, SettingsDep
from app.api.routes.jobs import QueueDep
from app.schemas.collections import (
    AliasBody,
    AliasInfo,
    AliasList,
    CollectionCreate,
    CollectionCreated,
    CollectionDeleted,
    CollectionInfo,
    CollectionList,
)
from contract.bundles.bundle import VERSION_RE
from contract.bundles.collections import DEFAULT_COLLECTION, check_name
from contract.errors import CollectionConflict, CollectionNotFound
from contract.jobs.queue import validate_options

logger = logging.getLogger(__name__)
router = APIRouter(tags=["collections"])
KEY_ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"description": "Not a collection or alias name (`collection_refused`)."},
    401: {"description": "No API key sent."},
    403: {"description": "Wrong API key, or none configured on the server."},
}
ACTIVE = ("queued", "running")


@router.get("/collections", response_model=CollectionList, summary="Collections")
async def list_collections(registry: CollectionsDep) -> CollectionList:
    """Every collection (none is loaded to list it), the aliases, and what this process has loaded."""

    def read() -> CollectionList:
        infos = [CollectionInfo(**registry.describe(n)) for n in registry.collections.names()]
        return CollectionList(
            collections=infos,
            aliases=registry.collections.aliases(),
            loaded=len(registry.loaded),
            max_loaded_collections=registry.settings.max_loaded_collections,
            max_loaded_bytes=registry.settings.max_loaded_bytes,
            resident_bytes=registry.resident_bytes(),
        )

    return await asyncio.to_thread(read)


@router.get(
    "/collections/{collection}",
    response_model=CollectionInfo,
    responses={400: KEY_ERRORS[400], 404: {"description": "No such collection or alias."}},
    summary="One collection",
)
async def get_collection(collection: CollectionPath, registry: CollectionsDep) -> CollectionInfo:
    """A collection (an alias is followed) as GET /collections lists it; loads nothing."""

    def read() -> CollectionInfo:
        name, _ = registry.resolve(collection)
        return CollectionInfo(**registry.describe(name))

    return await asyncio.to_thread(read)


@router.post(
    "/collections",
    status_code=201,
    response_model=CollectionCreated,
    dependencies=[ApiKeyDep],
    responses={
        **KEY_ERRORS,
        404: {"description": "No dataset with that name under the data root."},
        409: {"description": "The name is taken (by a collection or an alias)."},
        422: {"description": "Bad body or job options; the message names the field."},
    },
    summary="Create a collection (optionally trained from a dataset)",
)
async def create_collection(
    body: CollectionCreate, registry: CollectionsDep, queue: QueueDep, settings: SettingsDep
) -> CollectionCreated:
    """An empty collection under the collections root; with `dataset`, a retrain job that fine-tunes an
    encoder of its own on it and publishes the collection's first bundle through the quality gate."""
    name = check_name(body.name)
    if body.options:  # refused as POST /jobs would, with or without a dataset: nothing invalid is accepted
        validate_options("retrain", body.options)
    collections = registry.collections

    def create() -> str | None:
        meta = {"dataset": body.dataset} if body.dataset else {}
        folder = collections.create(name, meta)
        if body.dataset is None:
            return None
        try:
            record = queue.submit(
                "retrain",
                body.dataset,
                body.options,
                data_root=settings.data_root,
                bundles_dir=folder,
                models_root=settings.models_root,
                collection=name,
            )
        except Exception:  # the job was refused: take the collection back, so the request changed nothing
            collections.purge(collections.retire(name))
            raise
        return record.id

    job_id = await asyncio.to_thread(create)
    info = await asyncio.to_thread(registry.describe, name)
    return CollectionCreated(**info, job_id=job_id)


@router.delete(
    "/collections/{collection}",
    response_model=CollectionDeleted,
    dependencies=[ApiKeyDep],
    responses={
        **KEY_ERRORS,
        404: {"description": "No such collection (aliases are deleted with DELETE /aliases/{alias})."},
        409: {"description": "`default`, a collection with queued or running jobs, or one an alias names."},
    },
    summary="Delete a collection",
)
async def delete_collection(
    collection: CollectionPath, registry: CollectionsDep, queue: QueueDep
) -> CollectionDeleted:
    """Remove a collection and every version in it. Refused while a job of it is queued or running (cancel
    them first) and while an alias names it; other collections are not touched. In-flight requests on it
    finish on what they hold."""
    name = check_name(collection)
    if name == DEFAULT_COLLECTION:
        raise CollectionConflict("the default collection (SEARCH_BUNDLES_DIR) cannot be deleted")
    if name in registry.collections.aliases() and not registry.collections.exists(name):
        raise CollectionNotFound(
            f"{name!r} is an alias, not a collection: delete it with DELETE /aliases/{name}"
        )

    def retire() -> list[str]:
        folder = registry.collections.folder(name)
        active = [r.id for r in queue.recent(10_000) if r.collection == name and r.state in ACTIVE]
        if active:
            raise CollectionConflict(
                f"collection {name!r} has {len(active)} queued or running job(s) ({', '.join(active[:5])}): "
                "cancel them or let them finish first"
            )
        versions = sorted(p.name for p in folder.iterdir() if p.is_dir() and VERSION_RE.match(p.name))
        trash = registry.collections.retire(name)
        registry.drop_milvus(name, trash)
        registry.collections.purge(trash)
        return versions

    await registry.evict(name, reason="deleted")  # stop serving it first: nothing reloads a retired folder
    versions = await asyncio.to_thread(retire)
    await registry.evict(name, reason="deleted")  # in case a request loaded it again in between
    logger.info("collection %s deleted with %d version(s)", name, len(versions))
    return CollectionDeleted(deleted=name, versions=versions)


# -- aliases ------------------------------------------------------------------------------------------
@router.get("/aliases", response_model=AliasList, summary="Aliases")
async def list_aliases(registry: CollectionsDep) -> AliasList:
    return AliasList(aliases=await asyncio.to_thread(registry.collections.aliases))


@router.get(
    "/aliases/{alias}",
    response_model=AliasInfo,
    responses={400: KEY_ERRORS[400], 404: {"description": "No such alias."}},
    summary="One alias",
)
async def get_alias(alias: CollectionPath, registry: CollectionsDep) -> AliasInfo:
    check_name(alias, "alias")
    target = (await asyncio.to_thread(registry.collections.aliases)).get(alias)
    if target is None:
        raise CollectionNotFound(f"no alias named {alias!r}")
    return AliasInfo(alias=alias, collection=target)


@router.put(
    "/aliases/{alias}",
    response_model=AliasInfo,
    dependencies=[ApiKeyDep],
    responses={
        **KEY_ERRORS,
        404: {"description": "No collection with that name."},
        409: {"description": "The alias name is a collection's, or the target is an alias (alias → alias)."},
    },
    summary="Point an alias at a collection (create or switch)",
)
async def put_alias(alias: CollectionPath, body: AliasBody, registry: CollectionsDep) -> AliasInfo:
    """Create the alias or switch it, in one atomic replace of the aliases file: every request resolves it
    once, to the old collection or the new one. Rebuild a collection under a new name, then flip."""
    check_name(alias, "alias")
    check_name(body.collection)
    previous = await asyncio.to_thread(registry.collections.set_alias, alias, body.collection)
    await asyncio.to_thread(registry.sync_milvus_aliases)
    return AliasInfo(alias=alias, collection=body.collection, previous=previous)


@router.delete(
    "/aliases/{alias}",
    response_model=AliasInfo,
    dependencies=[ApiKeyDep],
    responses={**KEY_ERRORS, 404: {"description": "No such alias."}},
    summary="Delete an alias",
)
async def delete_alias(alias: CollectionPath, registry: CollectionsDep) -> AliasInfo:
    """The collection it named stays as it is."""
    check_name(alias, "alias")
    target = await asyncio.to_thread(registry.collections.remove_alias, alias)
    await asyncio.to_thread(registry.drop_milvus_alias, alias)
    return AliasInfo(alias=alias, collection=target)
