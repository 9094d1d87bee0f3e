"""Lab only: seeded defects, each a named bug a server runs with `--lab --lab-defect NAME`, so
the swarm (harness/swarm/search.py) can be shown to find and shrink what no hand-written scenario
catches (issue 24). Off in every other run; a name here is checked once, at configuration.

Each lives where the real bug would, behind `defect == NAME`, and is a one-line change there."""

from __future__ import annotations

# Each needs a feature no library file uses (stop strings, seeded sampling, a cache smaller than
# the requests), which is why the library passes with it and only a search that draws those
# features finds it; each shows whatever the timing, so its shrunk file fails live as well.
DEFECTS: dict[str, str] = {
    "stop_across_tokens": "a stop string is matched only inside one token's text, never across two tokens "
                          "(streamlab/detokenizer.py StopMatcher)",
    "shared_seed_rng": "requests with the same sampling seed share one generator, so each one's draws depend on "
                       "who else is decoding beside it (streamlab/engine/engine.py submit)",
    "last_free_block": "admission asks for one block more than a request needs: a request that needs every free "
                       "block waits for ever (streamlab/engine/blocks.py can_allocate)",
    "first_stop_only": "of a request's stop strings only the first is matched (streamlab/detokenizer.py "
                       "StopMatcher)",
    # The wire contract's (harness/judge/wire_checks.py): each shows in any stream long enough,
    # so the library catches them; the token ids stay right, so identity does not.
    "dropped_text_delta": "the text of every stream's third token event is sent empty, as a detokenizer that "
                          "loses a delta would (streamlab/hub/delivery.py)",
    "usage_off_by_one": "the done event's usage counts one completion token short for streams past 3 tokens "
                        "(streamlab/hub/delivery.py)",
    "stop_tail_after_stop": "the token that completes a stop string sends the stop string and what follows it "
                            "(streamlab/detokenizer.py StopMatcher)",
    "skipped_event_index": "token event indices skip one after the third event (streamlab/hub/delivery.py)",
    # Needs a stream paused by backpressure whose client then leaves: padded events, a small
    # receive buffer and a slow reader that leaves (scenarios/slow_reader_pause_leave.yaml).
    "paused_leaver_kept": "a client that hangs up while its stream is paused is never cancelled: the sequence "
                          "stays paused, holding its blocks (streamlab/hub/hub.py close)",
}
