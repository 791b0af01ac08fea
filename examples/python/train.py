"""train.py — the job `shoal train` runs, from Python: every option by its long name, the
report (its --json fields) as a dict.

    python3 examples/python/train.py                  # LeNet, 1 epoch, 2 ranks of this machine
"""
import os
import sys

import shoal

cfg = os.path.join(os.path.dirname(__file__), os.pardir, "lenet.cfg")
data = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("SHOAL_DATA_DIR", "/usr/share/datasets/fashion-mnist")
steps = int(sys.argv[2]) if len(sys.argv) > 2 else 0

report = shoal.train(cfg, data=data, epochs=1, ranks=2, scaling="strong", bucket_mb=2, quiet=True,
                     max_steps=steps or None)
print("test accuracy %.2f%% after %d steps, %.0f images/s" % (100 * report["accuracy"], report["steps"],
                                                               report["images_per_s"]))
for h in report["history"]:
    print("  epoch %.2f: test loss %.4f" % (h["epoch"], h["test_loss"]))
