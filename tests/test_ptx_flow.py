"""tools/ptx_flow.py's walk on small hand-written kernels: what it proves unreachable after
a give-up, and that it still finds what is reachable (each case has a twin that must hit)."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import ptx_flow  # noqa: E402

# one bounded wait (site 7) in the watchdog's shape: its give-up zeroes %r2 and sets the
# CTA's abort flag at [%r3]; then BODY
KERNEL = """
.visible .entry k()
{{
	.reg .b32 %r<16>;
	.reg .pred %p<16>;
	mov.u32 %r1, %tid.x;
	{{
	.reg .pred p;
	.reg .b32 x;
	mov.u32 %r2, 1;
	WD_SPIN:
	mbarrier.try_wait.parity.shared::cta.b64 p, [%r9], 0;
	@p bra WD_DONE;
	or.b32 x, x, 7;
	@!p bra WD_TIMEOUT;
	bra WD_SPIN;
	WD_TIMEOUT:
	st.shared.u32 [%r3], 1;
	WD_GIVEUP:
	mov.u32 %r2, 0;
	WD_DONE:
	}}
{body}
	ret;
}}
"""

# every thread's vote on the abort flag, OR-ed over the barrier and merged with a lane test
# (the compiler's form of `lead & (barrier_any(aborted) == 0)`)
VOTE = """
	ld.volatile.shared.u32 %r4, [%r3];
	{
	.reg .pred p, q;
	setp.ne.u32 q, %r4, 0;
	bar.red.or.pred p, 1, 128, q;
	selp.u32 %r5, 1, 0, p;
	}
"""


def _hits(body: str) -> list:
    return ptx_flow.reached_after(KERNEL.format(body=body), [7], r"st\.global")


def test_a_store_behind_a_vote_merged_by_or_is_not_reached_after_a_give_up():
    body = VOTE + """
	or.b32 %r6, %r5, %r1;
	setp.eq.b32 %p1, %r6, 0;
	@%p1 st.global.u32 [%r7], 1;
"""
    assert _hits(body) == []


def test_a_store_behind_an_and_of_the_vote_is_still_reached():
    # and with an unknown lane test does not make the vote's 1 survive
    body = VOTE + """
	and.b32 %r6, %r5, %r1;
	setp.eq.b32 %p1, %r6, 0;
	@%p1 st.global.u32 [%r7], 1;
"""
    assert _hits(body) != []


def test_a_store_behind_the_wait_result_is_not_reached_and_an_unguarded_one_is():
    guarded = """
	setp.ne.b32 %p2, %r2, 0;
	@%p2 st.global.u32 [%r7], 1;
"""
    assert _hits(guarded) == []
    assert _hits("\n\tst.global.u32 [%r7], 1;\n") != []


def test_nothing_is_reached_before_the_give_up():
    # a store before the wait is not "after a give-up"
    text = KERNEL.format(body="").replace("mov.u32 %r1, %tid.x;", "mov.u32 %r1, %tid.x;\n\tst.global.u32 [%r7], 1;")
    assert ptx_flow.reached_after(text, [7], r"st\.global") == []
