"""The fault suite: the real daemon on the simulated host against each fault class.

Each test is marked `@pytest.mark.fault("class", "what is done")`; the table of faults tried at
the end of the session is built by tests/faulttable.py (a plugin, so that it also works under
pytest-xdist). Shared helpers for these tests are in tests/faults/faultkit.py.
"""
