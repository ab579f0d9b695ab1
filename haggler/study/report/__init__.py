"""The study report: ``build_report(results, out_dir, ...)`` writes summary.json, report.md, report.html,
plots/ and tables/ from results files (and, given them, the study's config and arms).

Modules: ``assemble`` (the numbers, from results only), ``plots`` (matplotlib), ``markdown`` (report.md),
``html`` (report.html from ``templates/``), ``build`` (writes it all).
"""

from haggler.study.report.build import build_report

__all__ = ["build_report"]
