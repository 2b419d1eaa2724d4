"""Job kinds: how one attempt of each kind of job talks to the outside world.

Each kind lives in a folder of the same shape (`http/`, later `script/`); what they share
is the error type that carries retry meaning and the redaction applied to anything recorded.
"""

from __future__ import annotations
