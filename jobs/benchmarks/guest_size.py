"""How big a benchmark guest is: the job's request and the machine kind's default, never the
size of the host it happens to run on.

Workloads size themselves from the guest's memory (vm-scalability's and thpscale's fractions),
so a guest that grew with the host would measure a different benchmark on every machine and
take minutes per step on a large host. A QEMU worker therefore declares its *capacity* (what
it could offer, used to match requests to workers) and boots the kind's tiny guest unless the
submission asks for more (``min_cpus`` / ``min_memory_mb``). A bare-metal box has no guest: the
machine is its own size.
"""

from __future__ import annotations

from dataclasses import dataclass

from stackbench.errors import StackbenchError


@dataclass(frozen=True)
class GuestSize:
    cpus: int
    memory_mb: int


# the tiny guest every QEMU benchmark gets unless its job asks for more
KIND_DEFAULTS: dict[str, GuestSize] = {"qemu": GuestSize(cpus=2, memory_mb=1024)}


def _positive(what: str, value: object) -> int | None:
    if value in (None, ""):
        return None
    try:
        number = int(str(value))
    except ValueError:
        raise StackbenchError(f"{what} must be a whole number, not {value!r}") from None
    if number < 1:
        raise StackbenchError(f"{what} must be at least 1, not {number}")
    return number


def guest_size(
    kind: str,
    *,
    want_cpus: object = None,
    want_memory_mb: object = None,
    capacity_cpus: object = None,
    capacity_memory_mb: object = None,
) -> GuestSize | None:
    """The guest a benchmark of machine ``kind`` boots; None for kinds without a guest.

    ``want_*`` is what the job asked for (empty: the kind's default); ``capacity_*`` is what
    the worker declared. A request larger than the worker is refused, never shrunk: the
    numbers would belong to another benchmark."""
    default = KIND_DEFAULTS.get(kind)
    if default is None:
        return None
    cpus = _positive("guest CPUs", want_cpus) or default.cpus
    memory = _positive("guest memory (MiB)", want_memory_mb) or default.memory_mb
    cap_cpus = _positive("worker CPUs", capacity_cpus)
    cap_memory = _positive("worker memory (MiB)", capacity_memory_mb)
    if cap_cpus is not None and cpus > cap_cpus or cap_memory is not None and memory > cap_memory:
        raise StackbenchError(
            f"the job asks for a {cpus}-CPU {memory} MiB guest but this worker offers at most "
            f"{cap_cpus or '?'} CPUs and {cap_memory or '?'} MiB: submit it with a smaller "
            "min_cpus/min_memory_mb or add a bigger worker"
        )
    return GuestSize(cpus=cpus, memory_mb=memory)


def machine_name(worker: str, size: GuestSize | None) -> str:
    """The machine runs are stored under: the worker for its kind's default guest, the worker
    and the size for a bigger one (runs of different guest sizes must never be pooled)."""
    if size is None or size in KIND_DEFAULTS.values():
        return worker
    return f"{worker}-{size.cpus}cpu-{size.memory_mb}M"
