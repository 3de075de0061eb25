"""Offline answers (issue 20 item 4), round 48: round45's to round48's misses and the
sample KB's sentences a review found untrue.

- A name between the reader's "my" / "our" and a common noun ("Which URL should my
  Kubernetes liveness probe hit?") says what the reader's own thing is set in, not what
  is asked about (``llm.extractive_subject._is_object``): the question was declined for
  Kubernetes, which the sample KB never names, though it says which URL a liveness probe
  hits. "How do I restart a Kubernetes pod?" (an article) still asks about Kubernetes.
"""

from __future__ import annotations

from llm.extractive_subject import asked_about, declined, names


def test_a_name_qualifying_the_readers_own_thing_is_its_setting() -> None:
    probe = "Which URL should my Kubernetes liveness probe hit?"
    assert "Kubernetes" in names(probe)
    assert asked_about(probe) == []
    # Answered when a passage answers the rest well; declined when none does.
    assert declined(probe, ["Kubernetes"], answered=True) == ()
    assert declined(probe, ["Kubernetes"], answered=False) == ("Kubernetes",)
    assert asked_about("Can our Jenkins job start a run?") == []
    # An article, or the name as the head of what is asked, keeps it asked about.
    assert asked_about("How do I restart a Kubernetes pod?") == ["Kubernetes"]
    assert asked_about("How do I deploy it to my Kubernetes?") == ["Kubernetes"]
    assert declined("How do I restart a Kubernetes pod?", ["Kubernetes"], answered=True) == ("Kubernetes",)
