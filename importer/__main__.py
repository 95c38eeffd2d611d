"""The importer pod's program: configured from upstream CDI's environment variables.

Exit codes: 0 complete, 1 failed but worth a retry (the kubelet restarts the pod with
backoff), 2 failed for good (the termination message says why).
"""

import logging
import os
import sys
from pathlib import Path

from importer.config import TERMINATION_LOG, from_env
from importer.errors import ConfigError
from importer.redact import install_log_filter
from importer.run import run
from importer.termination import EXIT_PERMANENT, message, write
from vocab import podenv


def main() -> int:
    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    install_log_filter()
    try:
        config = from_env()
    except ConfigError as err:
        logging.error("%s", err.message)
        log = Path(os.environ.get(podenv.TERMINATION_LOG, TERMINATION_LOG))
        write(log, message(reason=err.reason, text=err.message, retryable=False))
        return EXIT_PERMANENT
    return run(config).exit_code


sys.exit(main())
