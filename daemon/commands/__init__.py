"""The `mlcostd` command line: run, check, report, prices."""
