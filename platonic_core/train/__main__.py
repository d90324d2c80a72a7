"""`python -m platonic.core.train ...` (what `torchrun_command` launches): see `launch.main`."""

from .launch import main

if __name__ == "__main__":
    raise SystemExit(main())
