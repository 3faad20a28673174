import os
import sys

from balagg.cli import exit_without_teardown, main
from balagg.jobserver import SOCKET_ENV

if __name__ == "__main__":
    code = None
    if os.environ.get(SOCKET_ENV):  # under `balagg jobserver` (docs/jobserver.md): offer the job to it
        from balagg.jobserver.client import run_through_server

        code = run_through_server(sys.argv)  # None: refused or unreachable, run here
    exit_without_teardown(main() if code is None else code)
