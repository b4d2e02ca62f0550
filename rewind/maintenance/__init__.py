"""Maintenance: garbage collection, and moving runs between databases.

    rw.gc(older_than_days=30)             # old cache entries, old runs, then orphaned blobs
    doc = rw.export_run(run_id)           # the run and its ancestors, self-contained JSON
    Rewind("postgresql://…").import_run(doc)

    gc          what to purge and what lineage keeps (the statements are the store's)
    export      a run with its ancestors and everything they refer to, as plain JSON
    documents   the export document as pydantic models; messages name the offending field
    references  checks across the document's parts (ids, hashes, referenced blobs)
    trust       imported cache entries re-verified against keys this process computes
    importer    validate everything, then write it in one transaction
"""

from .export import EXPORT_FORMAT, EXPORT_VERSION, export_run
from .gc import gc
from .importer import import_run

__all__ = ["gc", "export_run", "import_run", "EXPORT_FORMAT", "EXPORT_VERSION"]
