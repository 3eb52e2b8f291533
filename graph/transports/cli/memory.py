"""`tradegraph memory list|search|forget`: what the agents can recall, as they would recall it.

`search` is the kernel's `memory_search`, as over HTTP and MCP. `list` and `forget` read and delete the store
directly: they are for the person at this machine, and forgetting is deliberately not offered to remote callers."""

from __future__ import annotations


def _store(args):
    from graph.transports.cli.common import open_store

    return open_store(args.db)


def _date(value: str, flag: str) -> str:
    from agent.data.market import DataError, parse_date
    from graph.transports.cli.common import CliError

    try:
        return parse_date(value).strftime("%Y-%m-%d")
    except DataError as e:
        raise CliError(f"{flag}: {e}") from None


def cmd_list(args) -> int:
    store = _store(args)
    try:
        records = store.memories.list(
            symbol=args.symbol and args.symbol.upper(), session_id=args.session, kind=args.kind, limit=args.limit
        )
    finally:
        store.close()
    for r in records:
        if args.json:
            print(r.model_dump_json())
        else:
            tags = " ".join(f"{k}={v}" for k, v in (("outcome", r.outcome), ("signal", r.signal)) if v)
            print(f"{r.known_at}  {r.memory_id}  [{r.kind}] {r.symbol or '-'} {r.direction or ''} {tags}\n    {r.text}")
    return 0


def cmd_search(args) -> int:
    from graph.transports.cli.common import kernel_call

    as_of = _date(args.as_of, "--as-of")
    found = kernel_call(
        args.db, "memory_search", symbol=args.symbol, query=args.text, as_of=as_of, session_id=args.session, k=args.k
    )
    hits = found.hits
    if args.json:
        print(found.model_dump_json())
        return 0
    if not hits:
        print(f"no memory of {args.symbol.upper()} known before {as_of} shares a term with {args.text!r}")
    for i, h in enumerate(hits, 1):
        print(
            f"{i}. score {h.score:.6f} (bm25 rank {h.bm25_rank}, dense rank {h.dense_rank})  {h.memory_id}  "
            f"[{h.kind}] known {h.known_at} {h.outcome or ''} {h.signal or ''}\n    {h.text}"
        )
    return 0


def cmd_forget(args) -> int:
    from graph.transports.cli.common import CliError

    if not (args.id or args.session or args.symbol):
        raise CliError("say what to forget: --id ID, --session SESSION_ID or --symbol SYMBOL")
    store = _store(args)
    try:
        n = store.memories.forget(
            memory_id=args.id, session_id=args.session, symbol=args.symbol and args.symbol.upper()
        )
    finally:
        store.close()
    print(f"forgot {n} memor{'y' if n == 1 else 'ies'}")
    return 0


def register(subparsers) -> None:
    m = subparsers.add_parser("memory", help="list, search or forget the reviews and cycle notes agents recall")
    sub = m.add_subparsers(dest="memory_command", required=True)

    def db(sp):
        sp.add_argument("--db", default=None, help="store URI (default: $MONGODB_URI, else the embedded store)")

    ls = sub.add_parser("list", help="memories, oldest first")
    ls.add_argument("--symbol", default=None)
    ls.add_argument("--session", default=None)
    ls.add_argument("--kind", default=None, choices=["review", "cycle"])
    ls.add_argument("--limit", type=int, default=50)
    ls.add_argument("--json", action="store_true")
    db(ls)
    ls.set_defaults(fn=cmd_list)

    se = sub.add_parser("search", help="hybrid search (BM25 + hashed dense, RRF k=60), as an agent would recall")
    se.add_argument("symbol")
    se.add_argument("text")
    se.add_argument("--as-of", required=True, help="only memories known before this date (point in time)")
    se.add_argument("--session", default=None, help="only this session's memories")
    se.add_argument("--k", type=int, default=5)
    se.add_argument("--json", action="store_true")
    db(se)
    se.set_defaults(fn=cmd_search)

    fg = sub.add_parser("forget", help="delete memories by id, session or symbol")
    fg.add_argument("--id", default=None)
    fg.add_argument("--session", default=None)
    fg.add_argument("--symbol", default=None)
    db(fg)
    fg.set_defaults(fn=cmd_forget)
