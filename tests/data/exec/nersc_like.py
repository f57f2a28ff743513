"""Prints what NERSC pytorch-benchmarks' train.py prints, in its logging format (our own stand-in: that repository
carries no licence, so its code is not copied here): one 'Train samples … rate … samples/s' line per epoch."""

import logging
import sys
import time

logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
epochs, samples, epoch_s = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
logging.info("Initialized rank %i out of %i", 0, 1)
for epoch in range(epochs):
    logging.info("Epoch %i", epoch)
    start = time.time()
    time.sleep(epoch_s)
    elapsed = time.time() - start
    logging.info("  Training loss: %.4f", 2.3 / (epoch + 1))
    logging.info("Train samples %g time %g s rate %g samples/s", samples, elapsed, samples / elapsed)
logging.info("All done!")
