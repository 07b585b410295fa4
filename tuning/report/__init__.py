"""Reporting: turning what a run or a comparison wrote into words, tables and figures.

``python -m tuning.report DIR`` (comparison: a strategy comparison's report, or a run's through
runreport), analysis (a comparison's numbers), runplots (a run's figures) and render (Markdown and
HTML from one list of blocks). Reads files only; nothing here knows about Ray."""
