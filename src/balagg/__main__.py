import sys

from balagg.cli import exit_without_teardown, main
from balagg.jobserver import run_through_server

if __name__ == "__main__":
    code = run_through_server(sys.argv)  # None: no job server (balagg.jobserver), run here
    exit_without_teardown(main() if code is None else code)
