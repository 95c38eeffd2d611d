"""``python -m vm.launcher``: run the VMI given in the environment (see vm.launcher)."""

from __future__ import annotations

import asyncio
import logging
import os
import sys

from vm.launcher import config as config_mod
from vm.launcher import runner, termination
from vm.launcher.errors import ConfigError

logger = logging.getLogger("vm.launcher")


def _write_termination(path: str, outcome: termination.Outcome, extra: dict[str, object]) -> None:
    try:
        with open(path, "wb") as f:
            f.write(termination.encode(outcome, extra=extra))
    except OSError as err:
        logger.warning("cannot write the termination message to %s: %s", path, err)


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(
        level=os.environ.get("LAUNCHER_LOG_LEVEL", "INFO"),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    args = sys.argv[1:] if argv is None else argv
    try:
        config = config_mod.parse(env=os.environ, argv=args)
    except ConfigError as err:
        outcome = termination.Outcome("Failed", err.reason, err.message)
        _write_termination(config_mod.termination_path(args), outcome, {})
        logger.error("%s", err.message)
        return 2
    outcome = asyncio.run(runner.run(config))
    log = logger.info if outcome.phase == "Succeeded" else logger.error
    log("%s: %s %s", outcome.phase, outcome.reason, outcome.message)
    _write_termination(config.termination_log, outcome, {"driver": config.driver})
    return outcome.exit_code


if __name__ == "__main__":
    sys.exit(main())
