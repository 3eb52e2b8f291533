"""`tradegraph features` and `tradegraph schemas`: capabilities that read no store."""

from __future__ import annotations

import json
from pathlib import Path

from graph.transports.cli.common import EXIT_OK, kernel_call
from graph.transports.cli.data import add_data_flags, data_inputs


def cmd_schemas(args) -> int:
    schemas = kernel_call(None, "contract_schemas", needs_store=False).schemas
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name, schema in schemas.items():
        (out / f"{name}.schema.json").write_text(json.dumps(schema, indent=2) + "\n")
    print(f"wrote {len(schemas)} JSON Schemas to {out}")
    return EXIT_OK


def cmd_features(args) -> int:
    from graph.transports.cli.render import print_bundle

    bundle = kernel_call(
        None,
        "features",
        needs_store=False,
        symbol=args.symbol.strip(),
        as_of=args.as_of,
        market=args.market,
        **data_inputs(args),
    )
    if args.json:
        print(bundle.model_dump_json())
    else:
        print_bundle(bundle)
    return EXIT_OK


def register(sub) -> None:
    sc = sub.add_parser("schemas", help="write every contract's JSON Schema")
    sc.add_argument("--out", required=True)
    sc.set_defaults(fn=cmd_schemas)

    f = sub.add_parser("features", help="print a symbol's FeatureBundle at a date")
    f.add_argument("symbol")
    f.add_argument("--as-of", required=True)
    f.add_argument(
        "--market",
        default="us_equity",
        choices=["us_equity", "cn_a_share", "crypto"],
        help="the market whose calendar and close decide what is visible",
    )
    f.add_argument("--json", action="store_true")
    add_data_flags(f)
    f.set_defaults(fn=cmd_features)
