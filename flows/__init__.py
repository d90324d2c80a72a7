"""The app: the `platonic` CLI (cli.py, wiring the command groups of commands/), the Prefect
flows (pipeline, compare, ablate), the standalone commands (standalone.py), service set-up
(services.py) and developer tools (standins.py, serve_chat.py). The DAG and every
computation live in `platonic.core`; the stage contract is applied by
`platonic.tasks.executor`."""

from platonic.core.allocator import keep_freed_memory
from platonic.core.cpus import short_openmp_spins

short_openmp_spins()  # before anything imports torch: see platonic_core/cpus.py
keep_freed_memory()  # a step's freed tensors stay in the process: see platonic_core/allocator.py
