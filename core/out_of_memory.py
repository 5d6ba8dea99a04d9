"""What the TPU compiler says when a train step does not fit a chip, read into numbers and
one line with what to do: the xla backend meets it on a TPU's first step, the planner when
it compiles for a slice without one."""

from __future__ import annotations

import dataclasses
import re

# what to do when a step does not fit a chip (the analytic plan's verdict or the compiler's)
FIT_ADVICE = ("use a larger slice (more fsdp shards), a remat preset that keeps less on the "
              "chip (scan_checkpoint; llama: scan_offload), a smaller global_batch_size or "
              "seq_len, or grad_accum")


@dataclasses.dataclass
class OutOfMemory:
    """The compiler's refusal: the program's own buffers exceed the chip's usable HBM.
    Its check covers the program (temporaries, code), not the arguments."""

    program_bytes: int  # what the compiler found the program needs, at least
    usable_bytes: int  # HBM the compiler may use on one chip
    largest: list[str]  # its largest allocations: size, shape, what
    compile_seconds: float

    def message(self, advice: str = "") -> str:
        """The refusal in one line, with what to do (FIT_ADVICE and `advice`)."""
        largest = f" (largest: {', '.join(self.largest)})" if self.largest else ""
        return (f"the TPU compiler refused the train step: it needs at least "
                f"{self.program_bytes / 2**30:.1f} GiB per chip where "
                f"{self.usable_bytes / 2**30:.1f} GiB are usable{largest}; {FIT_ADVICE}{advice}")


# libtpu 0.0.20 says "Used 111.3G of 95.7G hbm"; 0.0.52 "the total memory required for HLO
# temporaries (314.75G) exceeds available HBM (95.73G)" (and lists no allocations)
_OOM = re.compile(r"(?:Used |required for HLO temporaries \()([\d.]+)([KMGT])\)? "
                  r"(?:of |exceeds available HBM \()([\d.]+)([KMGT])")
_ALLOCATION = re.compile(r"Size: ([\d.]+[KMGT]?)\n(?:.*\n)*?\s*Shape: (\S+)\n(?:.*\n)*?"
                         r"\s*XLA label: ([^=\n]+)")
_UNITS = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


_ONE_BUFFER = re.compile(r"Allocation \(size=(\d+)\) would exceed memory \(size=(\d+)\)"
                         r".*?shape = '([^']+)'.*?tag = '([^']+)'")


def parse_out_of_memory(message: str, seconds: float) -> OutOfMemory | None:
    """The numbers of libtpu's 'Ran out of memory in memory space hbm' error (0.0.52:
    'CompileTimeHbmOom'), or of its 'Allocation ... would exceed memory', one buffer bigger
    than a chip; None for any other message."""
    one = _ONE_BUFFER.search(message)
    if one:
        size, usable, shape, tag = one.groups()
        return OutOfMemory(int(size), int(usable), [f"{int(size) / 2**30:.2f}G "
                                                    f"{shape.split('{')[0]} ({tag})"], seconds)
    match = _OOM.search(message)
    if not match:
        return None
    used, used_unit, usable, usable_unit = match.groups()
    largest = [f"{size} {shape.split('{')[0]} ({label.strip()})"
               for size, shape, label in _ALLOCATION.findall(message)[:3]]
    return OutOfMemory(int(float(used) * _UNITS[used_unit]),
                       int(float(usable) * _UNITS[usable_unit]), largest, seconds)
