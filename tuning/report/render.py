"""Rendering a report's blocks, the one format both reports are built in: a list of (kind, *content)
tuples, kind one of h1, h2, banner, p, ul, img, table, written as Markdown or as one HTML page
with its images inlined, and the words both reports share (a number, a list of names). Used by
tuning.report (comparisons) and tuning.report.runreport (a run)."""

from __future__ import annotations

import base64
import html
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd


def number(x, digits: int = 3, missing: str = "n/a") -> str:
    """A figure as both reports print it: `digits` significant digits (numpy's too), `missing` for
    none or NaN, anything else as its text."""
    if x is None or (isinstance(x, (float, np.floating)) and math.isnan(x)):
        return missing
    return f"{x:.{digits}g}" if isinstance(x, (float, np.floating)) else str(x)


def cell(v) -> str:
    """A table cell's text: empty for a missing value (pandas' NA in a column of whole numbers that
    a conditional parameter leaves empty printed as <NA>)."""
    return "" if v is None or v is pd.NA else str(v)


def joined(names: list[str]) -> str:
    """Names as a sentence lists them: "a", "a and b", "a, b and c"."""
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def flatten(d: dict, prefix: str = ""):
    """(dotted key, value as text) of a nested dict: provenance as a two-column table."""
    for k, v in d.items():
        if isinstance(v, dict) and v:
            yield from flatten(v, f"{prefix}{k}.")
        else:
            yield f"{prefix}{k}", v if isinstance(v, str) else json.dumps(v, default=str)


def render_markdown(blocks: list[tuple]) -> str:
    out = []
    for kind, *c in blocks:
        if kind in ("h1", "h2"):
            out.append(("# " if kind == "h1" else "## ") + c[0])
        elif kind == "banner":  # what a reader must not miss, in large letters
            out.append(f"> ## {c[0]}")
        elif kind == "p":
            out.append(c[0])
        elif kind == "ul":
            out.append("\n".join(f"- {item}" for item in c[0]))
        elif kind == "img":
            out.append(f"![{c[1]}]({Path(c[0]).name})")
        elif kind == "table" and len(c[0].columns):
            md = lambda v: cell(v).replace("|", "\\|").replace("\n", " ")  # noqa: E731
            rows = [" | ".join(map(md, c[0].columns)), " | ".join("---" for _ in c[0].columns),
                    *(" | ".join(map(md, r)) for r in c[0].itertuples(index=False))]
            out.append("\n".join(f"| {r} |" for r in rows))
    return "\n\n".join(out) + "\n"


CSS = ("body{font-family:system-ui,sans-serif;max-width:1300px;margin:2em auto;padding:0 1em;color:#222}"
       "table{border-collapse:collapse;margin:1em 0;font-variant-numeric:tabular-nums}"
       "th,td{border:1px solid #ccc;padding:4px 8px;text-align:left;vertical-align:top;"
       "max-width:48em;overflow-wrap:break-word}th{background:#f2f2f2}img{max-width:100%}li{margin:.3em 0}")


BANNER = "font-size:1.8em;font-weight:bold;padding:.4em .7em;border:3px solid #b00;background:#fff0f0;color:#900"


def render_html(blocks: list[tuple], title: str, in_head: str = "") -> str:
    """The blocks as one HTML page, images inlined; `in_head` is extra markup for <head>."""
    e, out = html.escape, []
    for kind, *c in blocks:
        if kind in ("h1", "h2", "p"):
            out.append(f"<{kind}>{e(c[0])}</{kind}>")
        elif kind == "banner":
            out.append(f'<p style="{BANNER}">{e(c[0])}</p>')
        elif kind == "ul":
            out.append("<ul>" + "".join(f"<li>{e(i)}</li>" for i in c[0]) + "</ul>")
        elif kind == "img":
            data = base64.b64encode(Path(c[0]).read_bytes()).decode()
            out.append(f'<img src="data:image/png;base64,{data}" alt="{e(c[1])}">')
        elif kind == "table" and len(c[0].columns):
            head = "".join(f"<th>{e(str(h))}</th>" for h in c[0].columns)
            body = "".join("<tr>" + "".join(f"<td>{e(cell(v))}</td>" for v in r) + "</tr>"
                           for r in c[0].itertuples(index=False))
            out.append(f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")
    return (f'<!doctype html>\n<html lang="en"><head><meta charset="utf-8"><title>{e(title)}</title>'
            f"{in_head}<style>{CSS}</style></head><body>\n" + "\n".join(out) + "\n</body></html>\n")
