"""Notifications: where they go (targets), how they are sent, and what triggers them.

Workers only add rows to the `notify_events` outbox (`outbox.py`) after an attempt is
recorded; core delivers them (`dispatcher.py`). So a worker never needs the settings key
that opens target secrets, and a slow target never holds a worker slot.
"""
