#!/usr/bin/env python3
"""Unit tests of rxe_explain.py: which short counts resexd's log accounts for, and which not.

python3 -m unittest discover -s tools/kvm -p 'test_*.py'
"""
import datetime
import unittest

from rxe_explain import explain, marks_of

WANT = [4000, 256000, 4000]  # ib_write_lat -s 64 -n 2000: 2 000 writes from each end
SENDERS = 2


def stamp(hms):
    return f"2026-11-29T{hms}Z"


def epoch(hms):
    return datetime.datetime.fromisoformat(f"2026-11-29T{hms}+00:00").timestamp()


# Run 2's totals were read at 11:43:30, run 3's at 11:44:05.
MARKS = marks_of(f"mark {epoch('11:43:30')} run 2 end\nmark {epoch('11:44:05')} run 3 end\n")


def lap(hms, requests, laps=1):
    return (f"{stamp(hms)}  WARN resex_ibmon::rxe::monitor: ring 4 (rxe sq of qp 21): lapped "
            f"{laps} time(s) between two scans; {requests} requests were not counted (#1)")


def unregistered(hms, qp, last):
    return (f"{stamp(hms)}  INFO resex_ibmon::rings: resex-rxe: the send queue of qp {qp} "
            f"unregistered; the last request read on it was #{last} (#5)")


def got(short):
    return [WANT[0] - short, WANT[1] - 64 * short, WANT[2] - short]


class Explain(unittest.TestCase):
    def check(self, lines, short, overruns, used=frozenset(), run=3):
        return explain("\n".join(lines), set(used), MARKS, run, SENDERS, got(short), WANT,
                       overruns)

    def test_a_lap_in_the_run_accounts_for_its_requests(self):
        log = [lap("11:43:50.1", 2), unregistered("11:44:03.3", 21, 1999),
               unregistered("11:44:03.4", 22, 1999)]
        why, used = self.check(log, 2, overruns=1)
        self.assertIn("2 lost in 1 lap(s)", why)
        self.assertEqual(used, set())

    def test_a_lap_and_a_tail_together(self):
        log = [lap("11:43:50.1", 2), unregistered("11:44:03.3", 21, 1998),
               unregistered("11:44:03.4", 22, 1999)]
        why, used = self.check(log, 3, overruns=1)
        self.assertIn("qp 21 read to #1998 of #1999", why)
        self.assertEqual(used, {21})

    def test_the_tail_alone_as_before(self):
        log = [unregistered("11:44:03.3", 21, 1998), unregistered("11:44:03.4", 22, 1999)]
        why, used = self.check(log, 1, overruns=0)
        self.assertIn("1 posted after the host's last read", why)
        self.assertEqual(used, {21})

    def test_a_queue_explains_one_run_only(self):
        log = [unregistered("11:44:03.3", 21, 1998), unregistered("11:44:03.4", 22, 1999)]
        self.assertIsNone(self.check(log, 1, overruns=0, used={21})[0])

    def test_overruns_the_log_does_not_show_are_not_accounted_for(self):
        # A thinned-out log: two overruns in the run, one line.
        log = [lap("11:43:50.1", 2), unregistered("11:44:03.3", 21, 1999)]
        self.assertIsNone(self.check(log, 4, overruns=2)[0])
        self.assertIsNone(self.check(log, 2, overruns=2)[0])

    def test_a_lap_outside_the_run_does_not_count(self):
        log = [lap("11:43:20.0", 2), unregistered("11:44:03.3", 21, 1999)]
        self.assertIsNone(self.check(log, 2, overruns=1)[0])
        self.assertIsNone(self.check(log, 2, overruns=0)[0])

    def test_a_loss_nothing_in_the_log_explains_fails(self):
        log = [unregistered("11:44:03.3", 21, 1999), unregistered("11:44:03.4", 22, 1999)]
        self.assertIsNone(self.check(log, 2, overruns=0)[0])

    def test_a_partial_message_fails(self):
        log = [lap("11:43:50.1", 2)]
        partial = [WANT[0] - 2, WANT[1] - 100, WANT[2] - 2]
        self.assertIsNone(explain("\n".join(log), set(), MARKS, 3, SENDERS, partial, WANT, 1)[0])

    def test_more_laps_than_the_shortfall_fail(self):
        log = [lap("11:43:50.1", 6, laps=3)]
        self.assertIsNone(self.check(log, 2, overruns=1)[0])

    def test_an_exact_count_needs_no_explanation(self):
        self.assertIsNone(self.check([], 0, overruns=0)[0])


if __name__ == "__main__":
    unittest.main()
