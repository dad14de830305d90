"""The conformance check both backends run (test_langgraph_conformance.py,
test_langgraph_pg.py): LangGraph's whole suite, its report printed to the
terminal past pytest's capture (so `.ci/python` shows the capability table),
and every capability, base and extended, detected and passed."""

from __future__ import annotations

from langgraph.checkpoint.conformance import validate
from langgraph.checkpoint.conformance.capabilities import (
    BASE_CAPABILITIES,
    EXTENDED_CAPABILITIES,
)

ALL = {c.value for c in BASE_CAPABILITIES | EXTENDED_CAPABILITIES}


async def check_conformance(factory, capsys) -> None:
    """Runs the whole suite on ``factory``, prints its report to the
    terminal, and asserts that every capability was detected and passed."""
    report = await validate(factory)
    with capsys.disabled():
        report.print_report()
        counts = ", ".join(
            f"{name} {r.tests_passed}/{r.tests_passed + r.tests_failed}"
            for name, r in sorted(report.results.items())
        )
        print(f"  tests passed per capability: {counts}\n")
    failures = {n: r.failures for n, r in report.results.items() if r.failures}
    assert not failures, failures
    assert report.passed_all_base()
    assert report.passed_all()
    assert {n for n, r in report.results.items() if r.detected and r.passed} == ALL
    assert report.conformance_level() == "FULL"
