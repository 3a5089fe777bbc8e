"""Reads the TensorBoard event files that the jobs write with TensorBoard's own reader
(EventAccumulator) and checks what it finds.

  tensorboard_read.py writer PROGRAM   runs tests/train/tensorboard_write (PROGRAM) on a fresh
                                       folder and checks every tag, step and value it wrote
  tensorboard_read.py run LOGDIR [SCALAR [IMAGE,...]]
                                       a training job's folder: the scalar SCALAR (default
                                       "train/loss") at 2 or more increasing steps, and the
                                       images (default "curves"; PNGs of the size the event
                                       gives)

Exits 77 (CTest's skip) when the tensorboard package is missing.
"""

import struct
import subprocess
import sys
import tempfile
from pathlib import Path

try:
    from tensorboard.backend.event_processing import event_accumulator as ea
except ImportError:
    print("skipped: no tensorboard package (scripts/install_deps.sh installs it)", file=sys.stderr)
    sys.exit(77)

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def load(logdir):
    guidance = {
        kind: 0
        for kind in (
            ea.SCALARS,
            ea.IMAGES,
            ea.AUDIO,
            ea.HISTOGRAMS,
            ea.COMPRESSED_HISTOGRAMS,
            ea.TENSORS,
        )
    }
    acc = ea.EventAccumulator(str(logdir), size_guidance=guidance)
    acc.Reload()
    return acc


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def check(condition, message):
    if not condition:
        print("FAIL: " + message, file=sys.stderr)
        sys.exit(1)


def scalars(acc, tag):
    return [(e.step, e.value) for e in acc.Scalars(tag)]


def png_size(png):
    check(png[:8] == PNG_SIGNATURE, "not a PNG: %r" % png[:8])
    width, height = struct.unpack(">II", png[16:24])
    return width, height


def check_writer(program):
    with tempfile.TemporaryDirectory() as tmp:
        logdir, expected = Path(tmp) / "logs", Path(tmp) / "expected"
        subprocess.run([program, str(logdir), str(expected)], check=True)
        check(len(list(logdir.glob("events.out.tfevents.*"))) == 2, "two runs, two files")
        acc = load(logdir)
        tags = acc.Tags()
        check(
            sorted(tags["scalars"]) == ["eval/test_accuracy", "train/big", "train/loss", "value"],
            "scalar tags %s" % tags["scalars"],
        )
        check(sorted(tags["images"]) == ["grey", "pic", "rgba"], "image tags %s" % tags["images"])
        # Run 2 resumed from step 2: its steps 3 and 4 replace run 1's.
        want = [(1, 4.0), (2, f32(0.1)), (3, 30.0), (4, 40.0)]
        check(scalars(acc, "train/loss") == want, "train/loss %s" % scalars(acc, "train/loss"))
        check(scalars(acc, "eval/test_accuracy") == [(2, 0.8125)], "eval/test_accuracy")
        check(scalars(acc, "value") == [(2, 7.0)], "value %s" % scalars(acc, "value"))
        check(scalars(acc, "train/big") == [(1 << 40, 1.5)], "train/big %s" % scalars(acc, "train/big"))
        for tag, (width, height) in {"pic": (5, 3), "grey": (1, 1), "rgba": (4, 2)}.items():
            events = acc.Images(tag)
            check(len(events) == 1, "%s: %d image events" % (tag, len(events)))
            e = events[0]
            png = (expected / (tag + ".png")).read_bytes()
            check((e.step, e.width, e.height) == (4, width, height),
                  "%s: step %d, %d x %d" % (tag, e.step, e.width, e.height))
            check(e.encoded_image_string == png, "%s: other PNG bytes" % tag)
        print("tensorboard reads the writer's scalars and images: ok")


def check_run(logdir, scalar="train/loss", images=("curves",)):
    acc = load(logdir)
    tags = acc.Tags()
    check(scalar in tags["scalars"], "no %s in %s" % (scalar, tags["scalars"]))
    steps = [step for step, _ in scalars(acc, scalar)]
    check(len(steps) >= 2 and steps == sorted(set(steps)), "%s steps %s" % (scalar, steps))
    for image in images:
        check(image in tags["images"], "no %s image in %s" % (image, tags["images"]))
        for e in acc.Images(image):
            check(png_size(e.encoded_image_string) == (e.width, e.height),
                  "%s at step %d: the PNG's size differs from %d x %d"
                  % (image, e.step, e.width, e.height))
    print("tensorboard reads the run: %s at steps %s, images %s"
          % (scalar, steps, ", ".join("%s x%d" % (i, len(acc.Images(i))) for i in images)))


def main():
    if len(sys.argv) < 3 or sys.argv[1] not in ("writer", "run"):
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    if sys.argv[1] == "writer":
        check_writer(sys.argv[2])
    else:
        check_run(sys.argv[2], *sys.argv[3:4], *[tuple(a.split(",")) for a in sys.argv[4:5]])


if __name__ == "__main__":
    main()
