"""Transforms compiled per branch key into generated Python (the default path of a move).

A transform runs once per *branch key* on symbolic values (:mod:`.symbolic`, :mod:`.tracer`),
generically in the discrete values it reads; the accounting ``apply._account`` does per move
is done once per key (:mod:`.accounting`); the keys of one transform form one trie of
generated Python (:mod:`.codegen`) that computes every written value and the reduced
Jacobian's log |det| bit-identically to the float backend. :mod:`.environment` guards what
the code baked in from the transform's environment; :mod:`.cache` learns (tiered and
bounded) and serves; :mod:`.report` is ``transform.compiled``. ``apply.apply_compiled``
checks per move everything the key did not fix and hands anything else to the interpreter.
"""
