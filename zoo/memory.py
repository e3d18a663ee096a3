"""Memory a request would need, checked before it is allocated: a refusal that gives the figure
and what to pass instead, rather than an allocation failure deep in numpy, torch or JAX."""

from __future__ import annotations

from zoo.quadratic_features import physical_memory


class InsufficientMemoryError(MemoryError, ValueError):
    """A request that cannot fit in this machine's memory, refused before allocating it.

    The message gives the estimate in GiB, the memory available, and what to pass instead. A
    ``MemoryError`` and a ``ValueError`` (a bad argument, as the shell reports it).
    """


def available_memory() -> int | None:
    """Bytes of memory available to a new allocation (Linux's MemAvailable), else the machine's
    memory, else None where the OS does not say."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return physical_memory()


def check_fits(needed: int, what: str, instead: str) -> None:
    """Refuse ``what`` when its ``needed`` bytes exceed the memory available."""
    memory = available_memory()
    if memory is not None and needed > memory:
        raise InsufficientMemoryError(
            f"{what} would need at least {needed / 2**30:,.1f} GiB of memory; this machine has "
            f"{memory / 2**30:,.1f} GiB available. {instead}"
        )
