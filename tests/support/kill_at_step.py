"""Run one megatron-overlay command and die (os._exit(9)) at its K-th filesystem write.

    python kill_at_step.py K COMMAND [ARGS...]      K = 0: never die; print the count

A write is any audited rename, link, unlink or open for writing (sys.addaudithook), so
every step of the patch transaction -- staging, backups, the journal, each rename, the
commit, the cleanup, the bytecode refresh -- is a place the process can be killed, the
way SIGKILL or a node failure would kill it: no finally blocks, no atexit.
"""

import os
import sys

WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC


def _is_write(event: str, args: tuple) -> bool:
    if event in ("os.rename", "os.link", "os.remove", "os.rmdir", "os.symlink",
                 "shutil.move", "os.truncate"):
        return True
    if event == "open":
        _, mode, flags = args
        if isinstance(mode, str):
            return any(c in mode for c in "wax+")
        return isinstance(flags, int) and bool(flags & WRITE_FLAGS)
    return False


def main() -> int:
    kill_at = int(sys.argv[1])
    count = [0]

    def hook(event, args):
        if _is_write(event, args):
            count[0] += 1
            if count[0] == kill_at:
                os._exit(9)

    from megatron_overlay.cli import main as cli_main  # imported before the hook: reads only

    sys.addaudithook(hook)
    rc = cli_main(sys.argv[2:])
    if kill_at == 0:
        print(f"writes: {count[0]}", file=sys.stderr)
    return rc


if __name__ == "__main__":
    sys.exit(main())
