"""A job's text as it is handed out once the job closed: a branch that ended
on its own is handed out whole (a cluster's replica closes a job whose
branches all ended, and the server mirrors that), a closed one is not."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from flask_app.inference.job import Branch, BranchRun, Finish, Job, Request
from flask_app.inference.sampler import Sampling


class _Engine:
    def __init__(self) -> None:
        self.cond = threading.Condition()

    def release(self, job: Job) -> None:
        pass


def ended_job(finish: Finish) -> Job:
    branch = Branch(Sampling(temperature=0.0), max_tokens=16)
    job = Job(_Engine(), Request(prompt=[1, 2, 3], branches=(branch,)))  # type: ignore[arg-type]
    text = "The guest Wi-Fi network is called Calder-Guest."
    run = BranchRun(spec=branch, seq=0, rng=np.random.default_rng(0))
    run.text, run.ends, run.finish = text, [9, 16, 24, len(text)], finish
    job.branches.append(run)
    job.closed = True  # as RemoteJob.mirror("closed") leaves it
    return job


@pytest.mark.parametrize("finish", [Finish.STOP, Finish.LENGTH])
def test_a_branch_that_ended_is_handed_out_whole_after_its_job_closed(finish: Finish) -> None:
    job = ended_job(finish)
    assert "".join(job.pieces(0, deadline=None)) == job.branches[0].text


def test_a_closed_branch_hands_out_nothing_more() -> None:
    assert list(ended_job(Finish.CLOSED).pieces(0, deadline=None)) == []
