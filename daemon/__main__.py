import sys

try:
    from daemon.commands.cli import main
except KeyboardInterrupt:  # Ctrl-C while mlcostd is still importing: no traceback either
    sys.exit(130)

sys.exit(main())
