"""The log: what emit() writes, and its proof.

``store`` is the one writer of event rows (``EventStore.emit`` and ``emit_many``): it seals each draft
(``sealing``) after the tenant's chain head (``chain``), dispatches the in-process lanes (``lanes``: INLINE
before the commit, LOCAL after it) and commits the head, the event rows and the caller's writes (``writes``
builds them from plain values) in the one ``TransactWriteItems`` of ``transaction``, within what a transaction
may hold (``limits``). An event is its ``envelope``; its hash is sha256 over RFC 8785 ``canonical`` JSON;
``schemas`` brings a stored payload to its type's current version; ``verification`` recomputes a tenant's chain
from genesis or from an anchor (``verify_chain``).

Importing the package loads none of them: each is imported where it is used.
"""
