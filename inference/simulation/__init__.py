"""One simulation path: the request (`request.py`), what it may ask for (`limits.py`), the
world it runs in (`world.py`), the runner (`runner.py`) and the sink it writes through
(`sink.py`). Plain Python: no Django; torch only inside the `hf` backend."""
