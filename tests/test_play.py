import subprocess
import sys

from haggler.scenarios.generate import generate_scenarios


def test_a_person_can_play_the_buyer_in_the_terminal():
    scenario = generate_scenarios(1, 3)[0]
    # turn 1: counter-offer the cheapest price with first options; turn 2: accept the seller's next offer
    lines = ["I'd like a better price", "offer"] + ["1"] * len(scenario.issues) + ["fine", "accept"]
    r = subprocess.run([sys.executable, "-m", "haggler.cli", "play", "--seller", "scripted:conceder", "--seed", "3"],
                       input="\n".join(lines) + "\n", capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    # the person sees their own private preferences, never the seller's
    assert "You are the buyer" in out and f"No deal scores {scenario.buyer.reservation:.2f}" in out
    assert f"No deal scores {scenario.seller.reservation:.2f}" not in out or (
        scenario.seller.reservation == scenario.buyer.reservation)
    assert "Ended by accept" in out and "Agreement:" in out
    assert "Your utility (buyer):" in out and "Seller's utility:" in out


def test_play_refuses_an_unknown_seller():
    r = subprocess.run([sys.executable, "-m", "haggler.cli", "play", "--seller", "scripted:nobody"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "unknown scripted negotiator" in r.stderr
