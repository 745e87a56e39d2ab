"""relaybench: running benchmark sides in alternating rounds and reading
what they wrote, for every comparison script under bench/.

  rounds  run sides (commands) in alternating rounds into one folder
  rows    read bench/report.h output (its JSON, or its text table)
  stats   medians, paired ratios and bootstrap intervals
  tables  Markdown tables of sides against a reference side
  plot    busbw and time against size, one line per side, as SVG

Run it as `PYTHONPATH=bench python3 -m relaybench --help`; it needs only
Python's standard library (GPU hosts and CI boxes may lack anything else).
"""
