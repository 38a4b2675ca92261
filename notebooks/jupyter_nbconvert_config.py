"""nbconvert's settings for the project's virtual environment: the set-up (`make test`, `make
repro`, ...) copies this file to `.venv/etc/jupyter/`, where `jupyter nbconvert` reads it.

Each cell of `jupyter nbconvert --execute` gets at most 300 s, the limit every notebook also
states in its metadata (`execution.timeout`, which nbmake and papermill-free runners read):
nbclient's own default is no limit, so a cell that hangs would wait for ever. 300 s covers the
slowest real cell (the training cells of notebooks 04 and 06 on a cold run cache: up to 4.5
minutes on a busy 2-core CPU); the theory notebooks' cells take seconds.
"""

c = get_config()  # noqa: F821  (provided by Jupyter when it loads this file)
c.ExecutePreprocessor.timeout = 300
