"""Each phase's contract, declared once: its Arrow schemas, its vocabularies and a typed record of what its
manifest reports. Everything that shows a phase's data (the config's literals, `storage.schemas`, the round
summary, tracking, the web view, the benchmarks' tables) derives from these instead of restating them.

    from coevolve.contracts.signals import signal_kinds      # every kind, the paper's first
    from coevolve.contracts.verify import Verdict, reason_code

They sit on the bottom floor because the config (floor 0) validates against them and the web view (floor 2)
reads them; they import nothing of the project but `coevolve.core`, and pyarrow only when a schema is asked
for (`arrow.py`), so the config stays light. A closed vocabulary is an `Enum`; an open one, which a phase's
package extends with one call (a signal kind, a verification check's reason), is a registry of small frozen
records.
"""
