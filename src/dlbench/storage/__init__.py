"""Storage I/O: data sets in the formats training jobs read, and the readers (``dlbench io``).

* :mod:`._base`: the format contract and its registry (npy, npz, jpeg, tar, hdf5, tokens);
* :mod:`.manifest`: ``dlbench-dataset.json``, what a data set is, checked before every read;
* :mod:`.presets` and :mod:`.generate`: write a data set (MLPerf Storage's shapes or free ones), resumably;
* :mod:`.dataset`: the samples as a map-style ``torch`` Dataset (decoded, or raw bytes);
* :mod:`.cache`: drop a data set from the page cache and measure what stays;
* :mod:`.stage`: copy a data set to a faster tier with parallel streams.

The timed read (DataLoader, ranks, emulated compute) is the engine's (``dlbench.engine.io_read``).
"""
