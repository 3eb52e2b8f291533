"""The embedded store's server: nx-27017 with three changes to how it stores and answers documents.

Run as a script by database/embedded.py (`python database/nx_27017_server.py <nx-27017 arguments>`); it
imports only nx_27017 and neosqlite, never tradegraph.

1. Each insert command is one SQLite transaction. nx-27017 0.8.x stores an insert command's documents one
   `insert_one` at a time on an autocommit connection, so every document is its own SQLite transaction:
   its table page and six index pages are written to the WAL again for each document (29 ms for a cycle's
   215 events, 3 ms as one transaction), and under `synchronous=FULL` each is an fsync. Here the same loop
   runs inside one BEGIN … COMMIT, under the database's lock that nx-27017 already takes for the whole
   command, so no other command can interleave. The loop and its answer are nx-27017's own (an ordered
   insert stops at the first duplicate key and reports how many went in; a failed INSERT statement is
   undone by SQLite on its own and the transaction goes on), and what was inserted before the error is
   committed, as before. For a crash: a server killed mid-command keeps none of that command's documents
   instead of a prefix of them; either way the stored events are a contiguous prefix of the log and the
   client's retry (idempotent by event_id) or its spool has the rest.
2. No deepcopy of each inserted document (a third of an insert's server time; see _internal_insert).
3. Replies are converted to BSON types by a faster function with the same output (_fast_reply_converter).

Left alone (plain nx-27017): an insert that starts or runs inside a client transaction (its own BEGIN
IMMEDIATE on the same connection), a connection already inside a transaction, and any other nx-27017
or neosqlite version than the ones this was read against (nothing is patched then, with a line in the log).
"""
from __future__ import annotations

import logging
import sys

# the versions whose code the changes below were read against (nx-27017 0.8.1, neosqlite 1.17.2)
NX_VERSIONS = ("0.8.",)
NEOSQLITE_VERSIONS = ("1.17.",)
log = logging.getLogger("nx_27017")


def _body(msg: dict) -> dict:
    for section_type, doc in msg.get("sections") or ():
        if section_type == "body" and isinstance(doc, dict):
            return doc
    return {}


class _Docs(list):
    """An insert's documents with a short repr: nx-27017 formats `f"... {sections}"` for a debug line on every
    insert, whether debug logging is on or not (a repr of every document: 5% of an insert's time)."""

    def __repr__(self) -> str:
        return f"<{len(self)} documents>"


def _short_repr(kind: str, doc):
    """A section with its document lists as _Docs (OP_MSG.parse gives kind-1 sections as ("payload", {name: docs}))."""
    if kind == "payload_docs" and isinstance(doc, list):
        return _Docs(doc)
    if kind == "payload" and isinstance(doc, dict):
        return {k: _Docs(v) if isinstance(v, list) else v for k, v in doc.items()}
    return doc


def _internal_insert(self, document):
    """neosqlite 1.x QueryHelper._internal_insert without its deepcopy of the document (a third of an
    insert's server time). The copy protects the caller's document from the `_id` set below; a shallow
    copy does that, and `_convert_bytes_to_binary` then rebuilds every nested dict and list anyway. The
    stored JSON and the returned _id are the same as the original's."""
    from neosqlite._sqlite import sqlite3
    from neosqlite.collection.json_helpers import neosqlite_json_dumps
    from neosqlite.collection.query_helper.utils import _convert_bytes_to_binary
    from neosqlite.exceptions import MalformedDocument
    from neosqlite.objectid import ObjectId
    from neosqlite.sql_utils import quote_table_name

    if not isinstance(document, dict):
        raise MalformedDocument(f"document must be a dictionary, not a {type(document)}")
    doc_to_insert = dict(document)
    original_has_id = "_id" in doc_to_insert
    if not original_has_id or document["_id"] is None:
        generated_id = ObjectId()
    else:
        generated_id = document["_id"]
    doc_to_insert["_id"] = generated_id
    doc_to_insert = _convert_bytes_to_binary(doc_to_insert)
    json_str = neosqlite_json_dumps(doc_to_insert)
    if not self._validate_json_document(json_str):
        error_pos = self._get_json_error_position(json_str)
        if error_pos >= 0:
            raise ValueError(f"Invalid JSON document at position {error_pos}")
        raise ValueError("Invalid JSON document")
    cursor = self.collection.db.execute(
        f"INSERT INTO {quote_table_name(self.collection.name)}(data, _id) VALUES (?, ?)",
        (json_str, str(generated_id) if hasattr(generated_id, "__str__") else generated_id),
    )
    if cursor.lastrowid is None:
        raise sqlite3.Error("Failed to get last row id.")
    if not original_has_id:
        document["_id"] = generated_id
    return generated_id


def _fast_reply_converter():
    """nx_27017.utils.convert_neo_to_bson_objectids with the same output, faster: every reply document goes
    through it (37% of the server's time reading a 10k-event session), and almost every value in it is a
    str, int, float, bool, None or bytes, which it returns as is; here those are recognised by their exact
    type first, so a leaf costs one set lookup instead of four isinstance calls. Everything else takes the
    original's own checks, in its order (NeoSQLite ObjectId -> BSON ObjectId, Decimal -> Decimal128,
    lists and dicts recursively, a dict's `id: 0` -> Int64(0))."""
    from decimal import Decimal as PyDecimal

    from bson import Decimal128
    from bson import ObjectId as BsonObjectId
    from bson.int64 import Int64
    from neosqlite.objectid import ObjectId as NeoObjectId
    from nx_27017 import utils as nx_utils

    plain = nx_utils.convert_neo_to_bson_objectids
    scalars = frozenset({str, int, float, bool, type(None), bytes})

    def value_of(value):
        t = type(value)
        if t in scalars:
            return value
        if t is dict:
            return dict_of(value)
        if t is list:
            return [value_of(item) for item in value]
        if isinstance(value, NeoObjectId):
            return BsonObjectId(value.binary)
        if isinstance(value, PyDecimal):
            return Decimal128(value)
        if isinstance(value, list):
            return [value_of(item) for item in value]
        if isinstance(value, dict):
            return dict_of(value)
        return value

    def dict_of(doc):
        result = {}
        for key, value in doc.items():
            if key == "id" and value == 0:
                result[key] = Int64(0)
            else:
                result[key] = value_of(value)
        return result

    def convert(doc):
        if isinstance(doc, dict):
            return dict_of(doc)
        if isinstance(doc, list):
            return [value_of(item) for item in doc]
        return plain(doc)

    return convert


def _versions() -> tuple[str, str]:
    from importlib.metadata import version

    return version("nx-27017"), version("neosqlite")


def patch() -> bool:
    """Apply the changes (one transaction per insert command; no deepcopy per document; a faster reply
    converter with the same output); False if the
    installed nx-27017/neosqlite are not the versions they were written against (nothing is changed then)."""
    from neosqlite.collection.query_helper import QueryHelper
    from nx_27017 import handler as nx_handler
    from nx_27017 import wire_protocol as nx_wire

    nx_version, neo_version = _versions()
    if not (nx_version.startswith(NX_VERSIONS) and neo_version.startswith(NEOSQLITE_VERSIONS)):
        log.warning("tradegraph: nx-27017 %s / neosqlite %s are not the versions the insert path was written for: "
                    "left unpatched", nx_version, neo_version)
        return False
    cls = nx_handler.NeoSQLiteHandler
    if getattr(cls.handle_insert, "_tradegraph_batched", False):
        return True
    plain = cls.handle_insert

    def handle_insert(self, msg):
        body = _body(msg)
        if "startTransaction" in body or "autocommit" in body or not isinstance(body.get("insert"), str):
            return plain(self, msg)
        msg = {**msg, "sections": [(kind, _short_repr(kind, doc)) for kind, doc in msg.get("sections") or ()]}
        db_name = nx_handler._msg_db_name(msg)
        # the same (re-entrant) lock nx-27017's own wrapper takes: held from BEGIN to COMMIT
        with self._lock_for(db_name):
            try:
                db = self.get_database(db_name)
            except Exception:  # noqa: BLE001 - a bad name etc.: nx-27017 answers it itself
                return plain(self, msg)
            conn = db.db
            if conn.in_transaction:
                return plain(self, msg)
            # SQLite refuses to change `synchronous` inside a transaction: the command's write concern is
            # applied first (nx-27017 caches it per database, so its own call inside is then a no-op)
            self._apply_write_concern(db, db_name, body.get("writeConcern"))
            conn.execute("BEGIN")
            try:
                result = plain(self, msg)
            except BaseException:
                if conn.in_transaction:
                    conn.rollback()
                raise
            if conn.in_transaction:
                conn.commit()
            return result

    handle_insert._tradegraph_batched = True  # type: ignore[attr-defined]
    cls.handle_insert = handle_insert
    QueryHelper._internal_insert = _internal_insert
    nx_wire._convert_objectids = _fast_reply_converter()
    return True


def main() -> None:
    patch()
    from nx_27017.nx_27017 import main as nx_main

    sys.argv[0] = "nx_27017"
    sys.exit(nx_main())


if __name__ == "__main__":
    main()
