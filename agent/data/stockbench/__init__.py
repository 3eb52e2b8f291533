"""StockBench's data as tradegraph's evidence: bars, news, fundamentals computed from filings, corporate actions.

StockBench (github.com/ChenYXxxx/stockbench, arXiv 2510.02209, Apache-2.0) ships a `storage/` tree; `load_tree`
reads one from a folder (a checkout: DIR or DIR/storage) or from a tar archive of it, such as the copy shipped here
(`SHIPPED_ARCHIVE`, see NOTICE.md). Each part becomes the source the agents already read:
- `market`: MarketData from `parquet/{SYM}/day/{DATE}.parquet` (one bar per file). The bars are split-adjusted
  and NOT dividend-adjusted (Polygon `adjusted=true`): they are used as they are, never adjusted again. A session
  without a file has no bar (16 symbols lack 2025-02-11..02-19): nothing fills it in.
- `news`: NewsSource from `cache/news_by_day/{SYM}/{DATE}.json`, each item at its true publication time and each
  item once per symbol (news.py).
- `fundamentals`: FilingFundamentals, computed per decision from `cache/financials/{SYM}.{quarterly,annual}.json`,
  each filing public from its acceptance time (filings.py).
- `actions`: CorporateActions from `cache/corporate_actions/{SYM}.{dividends,splits}.json`. The bars already carry
  every split: a split is never applied to shares. Dividends are not in the bars: they are cash on the ex-date
  (agent/data/actions.py says how, and what is counted once).

Every number in every file read must be finite, and every bar whole (high >= open, close >= low; volume >= 0): a
violation is a DataError naming the file, the row or item and the field. Reading ~3,000 one-row Parquet files takes
seconds, so the parsed tree is kept under $TRADEGRAPH_HOME/cache/stockbench/, keyed by the tree's content hash
(the archive's sha256; for a folder, a hash over the files read) and by a hash of the reader's own source: a
changed tree, or a reader that derives differently, never reads a stale copy.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import pandas as pd

from agent.data import finite
from agent.data.actions import CorporateActions, build_actions
from agent.data.market import COLUMNS, DataError, MarketData, check_bar_values
from agent.data.news import NewsSource
from agent.data.stockbench import news as news_items
from agent.data.stockbench.filings import FilingFundamentals, quarters_of, reduce_filing
from agent.data.stockbench.tree import READ, Tree, content_sha256, fingerprint, locate, read_files

SHIPPED_ARCHIVE = Path(__file__).with_name("storage.tar.gz")
# the modules whose code decides what is derived from a tree (and so what a cached copy holds)
_READER = ("__init__.py", "tree.py", "news.py", "filings.py")
LABEL = "StockBench data"
FUNDAMENTALS_LABEL = "StockBench filings (SEC, via Polygon): figures computed by tradegraph"


@dataclass(frozen=True)
class StockBench:
    """One tree, read: its sources, and what `tradegraph data check` reports about it."""

    path: str  # the folder or archive, resolved
    sha256: str
    market: MarketData
    news: NewsSource
    fundamentals: FilingFundamentals
    actions: CorporateActions
    news_counts: dict  # symbol -> (items in the files, duplicates dropped)

    def source(self, kind: str) -> Any:
        """The source of one kind of agent.data.sources (prices, news, fundamentals, corporate_actions)."""
        return {
            "prices": self.market,
            "news": self.news,
            "fundamentals": self.fundamentals,
            "corporate_actions": self.actions,
        }[kind]


def is_tree(path: str | Path) -> bool:
    """True when `path` is a StockBench folder (with storage/parquet or parquet) or an archive by its name."""
    return locate(Path(path).expanduser().resolve()) is not None


def load_tree(path: str | Path = SHIPPED_ARCHIVE) -> StockBench:
    """The tree at `path` (default: the shipped archive), loaded once per version of its files per process."""
    p = Path(path).expanduser().resolve()
    tree = locate(p)
    if tree is None:
        raise DataError(
            f"{p}: not a StockBench data tree (expected {p}/storage/parquet/SYMBOL/day/DATE.parquet, "
            f"{p}/parquet/..., or a .tar.gz of it)"
            if p.exists()
            else f"{p}: file not found"
        )
    return _load(tree, fingerprint(tree))


def tree_sha256(path: str | Path) -> str:
    """The content hash a run manifest records for the tree at `path` (tree.content_sha256), taken again only when
    a file read changed."""
    p = Path(path).expanduser().resolve()
    tree = locate(p)
    if tree is None:
        raise DataError(f"{p}: not a StockBench data tree")
    return _sha(tree, fingerprint(tree))


@functools.lru_cache(maxsize=16)
def _sha(tree: Tree, version: str) -> str:
    return content_sha256(tree)


@functools.lru_cache(maxsize=4)
def _load(tree: Tree, version: str) -> StockBench:
    files = None if tree.archive else read_files(tree)
    sha = content_sha256(tree, files)
    cached = _read_cache(sha)
    if cached is not None:
        return _build(tree, sha, cached)
    derived = _derive(tree, read_files(tree) if files is None else files)
    loaded = _build(tree, sha, derived)  # validates everything before anything is cached
    _write_cache(sha, derived)
    return loaded


# ------------------------------------------------------------------------------------------ the derived cache
def cache_dir() -> Path:
    """$TRADEGRAPH_HOME/cache/stockbench when set (tests keep it in theirs), else the per-user cache directory
    ($XDG_CACHE_HOME/tradegraph, ~/.cache/tradegraph). Never the working directory: a `.tradegraph` folder made
    there would be found as a project's store (database/embedded.py resolve_home)."""
    if os.environ.get("TRADEGRAPH_HOME"):
        return Path(os.environ["TRADEGRAPH_HOME"]).expanduser() / "cache" / "stockbench"
    xdg = os.environ.get("XDG_CACHE_HOME") or ""
    root = Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".cache"
    return root / "tradegraph" / "stockbench"


@functools.lru_cache(maxsize=1)
def reader_version() -> str:
    """A hash of the reader's source: a cached tree derived by other code is not read."""
    digest = hashlib.sha256()
    for name in _READER:
        digest.update(Path(__file__).with_name(name).read_bytes())
    return digest.hexdigest()[:16]


def cache_file(sha: str) -> Path:
    return cache_dir() / f"{sha}.{reader_version()}.json"


def _read_cache(sha: str) -> Optional[dict]:
    try:
        doc = json.loads(cache_file(sha).read_bytes())
    except (OSError, ValueError):  # none yet, or a torn or foreign file: derived again from the tree
        return None
    ok = isinstance(doc, dict) and doc.get("reader") == reader_version() and doc.get("sha256") == sha
    return doc if ok else None


def _write_cache(sha: str, derived: dict) -> None:
    """Atomically (a reader sees the whole file or none); a home that cannot be written only costs the next load."""
    target = cache_file(sha)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=target.parent, suffix=".tmp", delete=False) as fh:
            json.dump(
                {**derived, "reader": reader_version(), "sha256": sha}, fh, allow_nan=False, separators=(",", ":")
            )
        os.replace(fh.name, target)
    except OSError:
        try:
            os.unlink(fh.name)
        except (OSError, NameError, UnboundLocalError):
            pass


# ------------------------------------------------------------------------------------------ reading the files
def _derive(tree: Tree, files: dict[str, bytes]) -> dict:
    """What the sources are built from, as plain JSON: bars as columns, news records, the filing lines used,
    corporate actions."""
    bars: dict[str, list] = {k: [] for k in ("file", "row", "symbol", "date", *COLUMNS)}
    news: dict[str, list] = {}
    filings: dict[str, dict[str, list]] = {}
    dividends: list[dict] = []
    splits: list[dict] = []
    for rel in sorted(files):
        m = READ.match(rel)
        if m is None:  # tree.py reads only the files READ matches
            continue
        if m["bar_sym"]:
            _bar_rows(tree, rel, files[rel], m["bar_sym"], bars)
            continue
        doc = _json(tree, rel, files[rel])
        if m["news_sym"]:
            items = doc.get("items") if isinstance(doc, dict) else None
            if not isinstance(items, list):
                raise DataError(f"{tree.where(rel)}: expected an object with an 'items' list")
            news.setdefault(m["news_sym"].upper(), []).extend(
                news_items.item_of(m["news_sym"].upper(), raw, f"{tree.where(rel)}: items[{i}]")
                for i, raw in enumerate(items)
            )
            continue
        if not isinstance(doc, list):
            raise DataError(f"{tree.where(rel)}: expected a list of records")
        if m["fin_sym"]:
            filings.setdefault(m["fin_sym"].upper(), {"quarterly": [], "annual": []})[m["fin_kind"]] = [
                reduce_filing(r, f"{tree.where(rel)}: record {n}") for n, r in enumerate(doc, start=1)
            ]
        else:
            keep = (
                ("ex_dividend_date", "pay_date", "cash_amount", "dividend_type")
                if m["ca_kind"] == "dividends"
                else ("execution_date", "split_from", "split_to")
            )
            records = [
                {"symbol": m["ca_sym"].upper(), **{k: r.get(k) for k in keep}} if isinstance(r, dict) else r
                for r in doc
            ]
            # checked file by file, so a bad record is named by its file
            build_actions(*((records, []) if m["ca_kind"] == "dividends" else ([], records)), tree.where(rel))
            (dividends if m["ca_kind"] == "dividends" else splits).extend(records)
    if not bars["file"]:
        raise DataError(f"{tree.path}: no StockBench bars in it (expected storage/parquet/SYMBOL/day/DATE.parquet)")
    counts = {}
    for symbol, records in news.items():
        news[symbol], dropped = news_items.dedup(records)
        counts[symbol] = [len(records), dropped]
    return {
        "bars": bars,
        "news": news,
        "news_counts": counts,
        "filings": filings,
        "dividends": dividends,
        "splits": splits,
    }


def _json(tree: Tree, rel: str, data: bytes) -> Any:
    try:
        doc = finite.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise DataError(f"{tree.where(rel)}: invalid JSON ({exc})") from None
    bad = finite.first_nonfinite(doc)
    if bad:
        raise DataError(f"{tree.where(rel)}: {finite.nonfinite_message(bad)}")
    return doc


def _bar_rows(tree: Tree, rel: str, data: bytes, symbol: str, bars: dict[str, list]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        # ParquetFile.read without threads: a third of read_table's cost on a one-row file
        table = pq.ParquetFile(pa.BufferReader(data)).read(use_threads=False)
    except (pa.ArrowException, OSError) as exc:
        raise DataError(f"{tree.where(rel)}: cannot read Parquet: {exc}") from None
    missing = [c for c in ("date", *COLUMNS) if c not in table.column_names]
    if missing:
        raise DataError(f"{tree.where(rel)}: missing column(s) {', '.join(missing)}")
    cols = table.select(["date", *COLUMNS]).to_pydict()
    for i in range(table.num_rows):
        bars["file"].append(rel)
        bars["row"].append(i + 1)
        bars["symbol"].append(symbol.upper())
        bars["date"].append(str(cols["date"][i])[:10] if cols["date"][i] is not None else None)
        for c in COLUMNS:
            v = cols[c][i]
            bars[c].append(float(v) if v is not None else float("nan"))


# ------------------------------------------------------------------------------------------ the sources
def _build(tree: Tree, sha: str, derived: dict) -> StockBench:
    origin = str(tree.path)
    market = MarketData(_frames(tree, derived["bars"]), source=origin, label=LABEL, sha256=sha)
    news = NewsSource([r for records in derived["news"].values() for r in records], source=origin, sha256=sha)
    filings = {
        s: quarters_of(f["quarterly"], f["annual"], f"{origin}: {s} filings") for s, f in derived["filings"].items()
    }
    fundamentals = FilingFundamentals(filings, market, source=FUNDAMENTALS_LABEL, origin=origin, sha256=sha)
    actions = build_actions(
        derived["dividends"],
        derived["splits"],
        origin,
        source=f"StockBench corporate actions: {origin}",
        origin=origin,
        sha256=sha,
    )
    counts = {s: tuple(v) for s, v in derived["news_counts"].items()}
    return StockBench(origin, sha, market, news, fundamentals, actions, counts)


def _frames(tree: Tree, bars: dict[str, list]) -> dict[str, pd.DataFrame]:
    df = pd.DataFrame(bars)

    def fail(i: int, col: str, what: str) -> None:
        raise DataError(f"{tree.where(df['file'].iloc[i])}: row {df['row'].iloc[i]}, column '{col}': {what}")

    for col in COLUMNS:
        na = df[col].isna().to_numpy()
        if na.any():
            fail(int(na.argmax()), col, "missing value (NaN)")
    check_bar_values(df, fail)
    dates = pd.to_datetime(df["date"], errors="coerce", format="%Y-%m-%d")
    bad = dates.isna().to_numpy()
    if bad.any():
        fail(int(bad.argmax()), "date", f"unparseable date {df['date'].iloc[int(bad.argmax())]!r}")
    named = df["file"].str.extract(r"/(\d{4}-\d{2}-\d{2})\.parquet$")[0]
    bad = (named != df["date"]).to_numpy()
    if bad.any():  # a bar filed under another day: whichever it is, one of the two is wrong
        fail(int(bad.argmax()), "date", f"{df['date'].iloc[int(bad.argmax())]} is not the day the file is named for")
    df["date"] = dates
    frames = {}
    for symbol, group in df.sort_values(["symbol", "date"], kind="stable").groupby("symbol", sort=True):
        dup = group["date"].duplicated().to_numpy()
        if dup.any():
            i = group.index[int(dup.argmax())]
            fail(int(i), "date", f"a second bar for {symbol} on {group['date'].loc[i].date()}")
        frames[str(symbol)] = group.set_index("date")[list(COLUMNS)]
    return frames
