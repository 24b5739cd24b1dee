"""Record the CPU NVTX fixture with Debian's nsys 2022.4 (see README.md here).

Nested push/pop ranges (step > forward > layer > attention > softmax), a named
domain, start/end ranges (one closed on another thread), marks, and ranges
around real CPU work, so the reader and the projection meet every NVTX shape.
"""

import threading
import time

import nvtx


def busy(ms: float) -> None:
    end = time.perf_counter() + ms / 1000
    while time.perf_counter() < end:
        pass


def layer(i: int) -> None:
    with nvtx.annotate(f"layer_{i}"):
        with nvtx.annotate("scaled dot product attention"):
            with nvtx.annotate("computing attention scores"):
                busy(1)
            with nvtx.annotate("computing softmax"):
                busy(0.5)
            with nvtx.annotate("final matmul"):
                busy(1)
        with nvtx.annotate("feed forward"):
            busy(1)


def main() -> None:
    handle = None
    for step in range(3):
        with nvtx.annotate("step"):
            with nvtx.annotate("forward"):
                for i in range(2):
                    layer(i)
            with nvtx.annotate("backward"):
                busy(3)
            with nvtx.annotate("optimizer", domain="profiler-kit-test"):
                busy(1)
        nvtx.mark(f"end of step {step}")
        if step == 0:
            handle = nvtx.start_range("cross-thread range")
    done = threading.Event()

    def closer():
        nvtx.end_range(handle)
        done.set()

    threading.Thread(target=closer).start()
    done.wait()
    r = nvtx.start_range("same-thread start/end")
    busy(1)
    nvtx.end_range(r)


if __name__ == "__main__":
    main()
