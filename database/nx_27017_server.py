"""The embedded store's server: nx-27017 with four changes to how it stores, finds and answers documents.

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
3. Replies are converted to BSON types by a faster function with the same output (_fast_reply_converter),
   except that an `id` key holding false, 0.0 or -0.0 keeps its value (nx-27017 made it Int64(0), a change
   to stored data that a hash chain reads as tampering).
4. A query that compares a field with an array or an embedded document answers as MongoDB does. neosqlite
   1.17, whose query matching nx-27017 uses, binds such a value itself as an SQLite parameter
   (`json_extract(data, '$.f') = ?` with a list: "Error binding parameter N: type 'list' is not
   supported"), reads `{f: {k: v}}` as operators ("Operator 'k' is not a valid query operation"), fails
   the same way inside `$eq`, `$in` and `$nin` (`$ne` answers wrongly), and in its Python tier compares an
   array only as a whole (20 errors and 2 wrong answers in tests/integration/test_embedded_query_equality.py).
   MongoDBSaver sends exactly this for a metadata filter (`{"metadata.source": ["msgpack", b"..."]}`: each
   metadata value is its serde's (type, bytes) pair), so listing a thread's checkpoints by metadata (state
   history, time travel) failed on the embedded store. Here the value is put in the form neosqlite stores
   documents in (its JSON, with its binary/ObjectId/$date markers) and compared node by node, in SQL with
   json_type/json_extract and in Python the same way: arrays element by element in order, embedded
   documents field by field in order (as MongoDB: `{p: 1, q: 2}` is not `{q: 2, p: 1}`), numbers by value
   (2 equals 2.0), a boolean never equal to a number; the field also matches when it is an array holding
   an element equal to the value, and arrays along a dotted path are traversed, as in MongoDB. `$in` is
   the OR of those equalities (scalar members keep neosqlite's own equality), `$nin` and `$ne` their
   negation (a missing field matches). This replaces neosqlite's three matchers for these shapes: the find
   cursor's SQL (_build_field_clause), the translator behind count, update, delete and aggregation `$match`
   (build_where_clause), and the Python tier both fall back to (_apply_query). What SQL cannot hold (a key
   containing `"`, a backslash, a control or non-ASCII character: neosqlite stores keys escaped and SQLite
   matches a path label against the escaped text; operands of more than 200 nodes) is answered by the Python
   tier; what neither handles (neosqlite's own `a[0]` paths, a regex, NaN, Decimal128 inside the value) keeps
   neosqlite's behaviour. Known to differ still, neosqlite's doing before any of this runs: its
   normalize_id_query_for_db rewrites every ObjectId inside the value to its hex string and reads any `id` key
   of an embedded document as an id (so `{a: [oid, 1]}` finds nothing, `{a: {id: "5"}}` finds `{id: 5}`), and
   its aggregation `$match` takes `{a: {}}` for "no operators" and matches every document. tradegraph's own
   queries compare no field with such a value.

Left alone (plain nx-27017): an insert that starts or runs inside a client transaction (its own BEGIN
IMMEDIATE on the same connection), a connection already inside a transaction, and any other nx-27017
or neosqlite version than the ones this was read against (nothing is patched then, with a line in the log).
"""

from __future__ import annotations

import itertools
import json
import logging
import sys
from collections.abc import Callable, Iterator
from typing import Any

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
    lists and dicts recursively, a dict's `id: 0` -> Int64(0)). One answer differs on purpose: an `id` holding
    false, 0.0 or -0.0 stays as stored (the original made each Int64(0))."""
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
            # nx-27017's rule is for a cursor's id, an integer the wire needs as int64; its `== 0` also took
            # false, 0.0 and -0.0 under any `id` key of a stored document, which changed them on a read through
            # the server (the file read keeps them, and the event's hash was then not the one stored)
            if key == "id" and type(value) is int and value == 0:
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


class _Inexpressible(Exception):
    """A field or value change 4 does not handle: neosqlite's own translation is kept for it."""


class _PythonOnly(_Inexpressible):
    """Change 4 answers it in the Python tier but not in SQL (a key holding `"`, a value too large for one SQL
    expression): the SQL builders answer "unsupported" (None), so their callers take the Python tier."""


# a SQL fragment and the parameters it binds, in order
Clause = tuple[str, list]
_EQUALITY_OPERATORS = ("$eq", "$ne", "$in", "$nin")
# nodes of one field's array/document operands (and $in members) in SQL: each is a term or two of an AND/OR
# chain, and SQLite refuses an expression deeper than 1000
_SQL_NODES = 200
_aliases = itertools.count()  # json_each aliases, unique within any statement


def _is_composite(value: Any) -> bool:
    return isinstance(value, (list, dict))


def _composite_conditions(field: str, condition: Any) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """The part of a field's condition that compares it with an array or a document, as {operator: operand}
    ($eq for a plain value), and the field's other operators; None when there is no such part (neosqlite's
    own handling is right then)."""
    if field.startswith("$") or field == "_id":
        return None
    if isinstance(condition, list) or (isinstance(condition, dict) and not any(k.startswith("$") for k in condition)):
        return {"$eq": condition}, {}
    if not isinstance(condition, dict):
        return None
    ours = {
        op: operand
        for op, operand in condition.items()
        if op in _EQUALITY_OPERATORS
        and (
            _is_composite(operand)
            if op in ("$eq", "$ne")
            else isinstance(operand, list) and any(map(_is_composite, operand))
        )
    }
    return (ours, {op: v for op, v in condition.items() if op not in ours}) if ours else None


def _segments(field: str) -> list[str]:
    segments = field.split(".")
    if any(not s or "[" in s or s.startswith("$") for s in segments):  # "a[0]" is neosqlite's own syntax
        raise _Inexpressible
    return segments


def _stored_form(value: Any) -> Any:
    """value as neosqlite keeps it in a document's JSON: bytes as its binary marker, ObjectId and datetime as
    theirs (the insert path's own conversion and serializer), so a query value and a stored one compare."""
    from neosqlite.collection.json_helpers import neosqlite_json_dumps
    from neosqlite.collection.query_helper.utils import _convert_bytes_to_binary

    try:
        return json.loads(neosqlite_json_dumps(_convert_bytes_to_binary(value), allow_nan=False))
    except (TypeError, ValueError) as exc:  # a regex, a Decimal128, NaN ...
        raise _Inexpressible from exc


# --- in SQL (find, count, update and delete filters) ---


def _label(key: str) -> str:
    if '"' in key:  # a quoted JSON-path label has no escape for it
        raise _PythonOnly
    # neosqlite stores keys as json.dumps writes them (ASCII, escaped), and SQLite compares a path's label with
    # that escaped text: a key with a non-ASCII character, a backslash or a control character would never match
    if not key.isascii() or not key.isprintable() or "\\" in key:
        raise _PythonOnly
    return f'."{key}"'


def _index(segment: str) -> bool:
    """A path segment MongoDB reads as an array index: ASCII digits only ("١" and "²" are digits to str.isdigit)."""
    return segment.isascii() and segment.isdigit()


def _nodes(value: Any) -> int:
    if isinstance(value, list):
        return 1 + sum(map(_nodes, value))
    if isinstance(value, dict):
        return 1 + sum(map(_nodes, value.values()))
    return 4 if isinstance(value, bytes) else 1  # binary is a three-field marker document when stored


def _at(base: str | None, suffix: str) -> Clause:
    """A JSON path into `data`: a literal, or a json_each row's fullkey with a literal suffix."""
    return ("?", [suffix]) if base is None else (f"({base} || ?)", [suffix])


# each part in brackets of its own: neosqlite's clauses come bare (its $or is `(c1) OR (c2)`), and one joined
# with AND unbracketed would bind as `A AND (c1) OR (c2)`
def _all(*clauses: Clause) -> Clause:
    return "(" + " AND ".join(f"({c[0]})" for c in clauses) + ")", [p for c in clauses for p in c[1]]


def _any(*clauses: Clause) -> Clause:
    return "(" + " OR ".join(f"({c[0]})" for c in clauses) + ")", [p for c in clauses for p in c[1]]


def _none(clause: Clause) -> Clause:
    # a missing path makes json_type NULL, and NOT NULL is NULL: a missing field must match $ne/$nin
    return f"NOT COALESCE({clause[0]}, 0)", clause[1]


def _equal(base: str | None, suffix: str, value: Any) -> Clause:
    """The JSON node at the path equals value (in stored form) as MongoDB compares: arrays element by element,
    documents field by field in order, numbers by value, a boolean never equal to a number."""
    at, p = _at(base, suffix)
    kind = f"json_type(data, {at})"
    if value is None:
        return f"{kind} = 'null'", p
    if isinstance(value, bool):
        return f"{kind} = ?", [*p, "true" if value else "false"]
    if isinstance(value, (int, float)):
        return f"({kind} IN ('integer', 'real') AND json_extract(data, {at}) = ?)", [*p, *p, value]
    if isinstance(value, str):
        return f"({kind} = 'text' AND json_extract(data, {at}) = ?)", [*p, *p, value]
    if isinstance(value, list):
        shape: Clause = (f"{kind} = 'array' AND json_array_length(data, {at}) = ?", [*p, *p, len(value)])
        return _all(shape, *(_equal(base, f"{suffix}[{i}]", item) for i, item in enumerate(value)))
    keys = json.dumps(list(value), separators=(",", ":"), ensure_ascii=False)
    shape = (f"{kind} = 'object' AND (SELECT json_group_array(key) FROM json_each(data, {at})) = ?", [*p, *p, keys])
    return _all(shape, *(_equal(base, suffix + _label(k), item) for k, item in value.items()))


def _some_element(base: str | None, suffix: str, holds: Callable[[str], Clause]) -> Clause:
    """The node at the path is an array and `holds` is true of one of its elements (given its path)."""
    at, p = _at(base, suffix)
    alias = f"tg_e{next(_aliases)}"
    inner, q = holds(f"{alias}.fullkey")
    return (
        f"(json_type(data, {at}) = 'array' AND EXISTS (SELECT 1 FROM json_each(data, {at}) AS {alias} WHERE {inner}))",
        [*p, *p, *q],
    )


def _matches(base: str | None, suffix: str, segments: list[str], value: Any, traversable: bool) -> Clause:
    """MongoDB's `{field: value}` for the node at the path followed by the field's remaining segments: the
    leaf equals value or is an array holding it; an array met on the way is traversed (one level, as MongoDB)."""
    if not segments:
        return _any(_equal(base, suffix, value), _some_element(base, suffix, lambda e: _equal(e, "", value)))
    head, rest = segments[0], segments[1:]
    arms = [_matches(base, suffix + _label(head), rest, value, True)]
    if _index(head):  # "a.0": the first element of an array a
        arms.append(_matches(base, f"{suffix}[{int(head)}]", rest, value, True))
    if traversable:
        arms.append(_some_element(base, suffix, lambda e: _matches(e, "", segments, value, False)))
    return _any(*arms)


def _field_equals(field: str, value: Any) -> Clause:
    return _matches(None, "$", _segments(field), _stored_form(value), traversable=False)


def _field_clause(
    field: str, ours: dict[str, Any], rest: dict[str, Any], plain: Callable[[Any], Clause | None]
) -> Clause:
    """The SQL for one field's condition; plain(condition) is neosqlite's own clause for that field, used for
    scalar $in members and the field's other operators."""

    def own(condition: Any) -> Clause:
        clause = plain(condition)
        if clause is None:
            raise _Inexpressible
        return clause

    def member(m: Any) -> Clause:
        return _field_equals(field, m) if _is_composite(m) else own(m)

    if sum(map(_nodes, ours.values())) > _SQL_NODES:
        raise _PythonOnly
    parts = []
    for op, operand in ours.items():
        if op in ("$eq", "$ne"):
            equal = _field_equals(field, operand)
            parts.append(equal if op == "$eq" else _none(equal))
        else:
            one_of = _any(*map(member, operand))
            parts.append(one_of if op == "$in" else _none(one_of))
    if rest:
        parts.append(own(rest))
    return _all(*parts)


# --- in Python (neosqlite's fallback tier: $or/$and/$nor/$not, aggregation $match) ---


def _same(a: Any, b: Any) -> bool:
    """MongoDB equality of two values in stored form (the SQL _equal's rules)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(map(_same, a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def _leaves(node: Any, segments: list[str], traversable: bool) -> Iterator[Any]:
    """The values a dotted path reaches in a decoded document (the SQL _matches's walk)."""
    if not segments:
        yield node
        return
    head, rest = segments[0], segments[1:]
    if isinstance(node, dict) and head in node:
        yield from _leaves(node[head], rest, True)
    if isinstance(node, list):
        if _index(head) and int(head) < len(node):
            yield from _leaves(node[int(head)], rest, True)
        if traversable:
            for element in node:
                yield from _leaves(element, segments, False)


def _holds(document: dict, field: str, value: Any) -> bool:
    target = _stored_form(value)
    for leaf in _leaves(document, _segments(field), False):
        try:
            leaf = _stored_form(leaf)
        except _Inexpressible:
            continue  # a NaN, a Decimal ...: not equal to an array or a document
        if _same(leaf, target) or (isinstance(leaf, list) and any(_same(e, target) for e in leaf)):
            return True
    return False


def _field_holds(
    document: dict, field: str, ours: dict[str, Any], rest: dict[str, Any], plain: Callable[[Any], bool]
) -> bool:
    """The Python tier's answer for one field's condition; plain(condition) is neosqlite's own."""

    def member(m: Any) -> bool:
        return _holds(document, field, m) if _is_composite(m) else plain(m)

    for op, operand in ours.items():
        if op in ("$eq", "$ne"):
            if _holds(document, field, operand) != (op == "$eq"):
                return False
        elif any(map(member, operand)) != (op == "$in"):
            return False
    return not rest or plain(rest)


def _patch_query_translation() -> None:
    """Change 4 (see the module docstring) at neosqlite's three places that compare a field with a value: the
    find cursor's SQL, the translator behind count, update, delete and aggregation $match, and the Python tier
    they fall back to ($or/$and/$nor/$not, aggregation stages)."""
    from neosqlite.collection.query_helper._sql_query_builder import SqlQueryBuilderMixin
    from neosqlite.collection.query_helper.query_builder import QueryBuilderMixin
    from neosqlite.collection.sql_translator_unified import SQLClauseBuilder

    plain_clause = SqlQueryBuilderMixin._build_field_clause
    plain_where = SQLClauseBuilder.build_where_clause
    plain_apply = QueryBuilderMixin._apply_query
    if getattr(plain_clause, "_tradegraph_equality", False):
        return

    def _build_field_clause(self, field, value):
        split = _composite_conditions(field, value)
        if split is not None:
            try:
                return _field_clause(field, *split, lambda c: plain_clause(self, field, c))
            except _PythonOnly:
                return None  # the cursor's Python tier (below) answers
            except _Inexpressible:
                pass
        return plain_clause(self, field, value)

    def build_where_clause(self, query, context="direct", is_nested=False, query_param=None):
        splits = {f: sp for f, c in query.items() if (sp := _composite_conditions(f, c)) is not None}
        if not splits or self.data_column != "data":
            return plain_where(self, query, context, is_nested, query_param)

        def plain(field: str) -> Callable[[Any], Clause | None]:
            def clause(condition: Any) -> Clause | None:
                sql, params = plain_where(self, {field: condition}, context, True, query_param)
                return None if sql is None else (sql, params)

            return clause

        try:
            ours = [_field_clause(f, *sp, plain(f)) for f, sp in splits.items()]
        except _PythonOnly:
            return None, []  # its callers' own fallback: the Python tier, as for an operator it lacks
        except _Inexpressible:
            return plain_where(self, query, context, is_nested, query_param)
        rest = {f: c for f, c in query.items() if f not in splits}
        sql, params = plain_where(self, rest, context, True, query_param) if rest else ("", [])
        if sql is None:
            return None, []
        where, params = _all(*ours, *([(sql, params)] if sql else []))
        return (where if is_nested else f"WHERE {where}"), params

    def _apply_query(self, query, document):
        if document is None or not isinstance(query, dict):
            return plain_apply(self, query, document)
        splits = {f: sp for f, c in query.items() if (sp := _composite_conditions(f, c)) is not None}
        if not splits:
            return plain_apply(self, query, document)

        def plain(field: str) -> Callable[[Any], bool]:
            return lambda condition: plain_apply(self, {field: condition}, document)

        try:
            held = all(_field_holds(document, f, *sp, plain(f)) for f, sp in splits.items())
        except _Inexpressible:
            return plain_apply(self, query, document)
        return held and plain_apply(self, {f: c for f, c in query.items() if f not in splits}, document)

    _build_field_clause._tradegraph_equality = True  # type: ignore[attr-defined]
    SqlQueryBuilderMixin._build_field_clause = _build_field_clause
    SQLClauseBuilder.build_where_clause = build_where_clause
    QueryBuilderMixin._apply_query = _apply_query


def _versions() -> tuple[str, str]:
    from importlib.metadata import version

    return version("nx-27017"), version("neosqlite")


def patch() -> bool:
    """Apply the changes (one transaction per insert command; no deepcopy per document; a faster reply
    converter with the same output; equality with arrays and documents); False if the
    installed nx-27017/neosqlite are not the versions they were written against (nothing is changed then)."""
    from neosqlite.collection.query_helper import QueryHelper
    from nx_27017 import handler as nx_handler
    from nx_27017 import wire_protocol as nx_wire

    nx_version, neo_version = _versions()
    if not (nx_version.startswith(NX_VERSIONS) and neo_version.startswith(NEOSQLITE_VERSIONS)):
        log.warning(
            "tradegraph: nx-27017 %s / neosqlite %s are not the versions these changes were written for: "
            "left unpatched",
            nx_version,
            neo_version,
        )
        return False
    _patch_query_translation()
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
