"""File collections, a core service every surface reaches through the app's
services: namespaces, collections and their files (the catalog), ingestion,
who may read which file, and search over the files a caller may read."""

from flask_app.file_collections.names import (
    NAME,
    PRINCIPAL,
    PRINCIPAL_MAX,
    PRINCIPALS_MAX,
    split_qualified,
)
from flask_app.file_collections.service import FileCollections, FoundPassage

__all__ = [
    "NAME",
    "PRINCIPAL",
    "PRINCIPALS_MAX",
    "PRINCIPAL_MAX",
    "FileCollections",
    "FoundPassage",
    "split_qualified",
]
