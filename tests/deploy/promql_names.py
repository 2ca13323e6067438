"""Run by the tools venv's Python: reads a JSON list of PromQL queries, prints [{names, error}] for each."""
from __future__ import annotations

import json
import sys

import promql_parser


def metric_names(expr: str) -> list[str]:
    """Names of every vector selector in expr; `{__name__="x"}` selectors count by their matcher."""
    names: list[str] = []

    def visit(node: object) -> None:
        if isinstance(node, promql_parser.VectorSelector):
            if node.name:
                names.append(node.name)
            for m in node.matchers.matchers:
                if m.name == "__name__":
                    names.append(m.value)

    promql_parser.walk(promql_parser.parse(expr), visit)
    return names


def main() -> None:
    results = []
    for expr in json.load(sys.stdin):
        try:
            results.append({"names": metric_names(expr), "error": None})
        except Exception as err:  # the parser raises ValueError, but any failure is a finding to report
            results.append({"names": [], "error": f"{type(err).__name__}: {err}"})
    json.dump(results, sys.stdout)


if __name__ == "__main__":
    main()
