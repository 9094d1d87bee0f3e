"""Lab only: seeded defects, each a named bug a server runs with `--lab --lab-defect NAME`, so
the swarm (harness/swarm.py) can be shown to find and shrink what no hand-written scenario
catches (issue 24). Off in every other run; a name here is checked once, at configuration.

Each lives where the real bug would, behind `defect == NAME`, and is a one-line change there."""

from __future__ import annotations

DEFECTS: dict[str, str] = {
    "paused_expiry_leak": "a paused stream whose client left is not cancelled when its resume window expires: its "
                          "sequence stays paused and holds its blocks (streamlab/hub.py close)",
    "stop_across_tokens": "a stop string is matched only inside one token's text, never across two tokens "
                          "(streamlab/detokenizer.py StopMatcher)",
    "cancel_beside_pause": "a client that leaves while another stream is paused cancels the paused stream's "
                           "sequence instead of its own (streamlab/hub.py close)",
    "deadline_after_admission": "a first-token deadline that passes after admission, before the first token, "
                                "pauses the sequence instead of leaving it alone: its slot and blocks are never "
                                "returned (streamlab/hub.py _deadline_passed)",
}
