import re
import subprocess
import sys

import pytest

from haggler.scenarios.genius import GeniusImportError, import_genius
from haggler.core.scenario import load_scenarios
from tests.conftest import DOMAINS


def _import(genius_dir, key, **kw):
    d, s, b = (genius_dir / p for p in DOMAINS[key])
    return import_genius(d, s, b, **kw)


def test_the_four_discrete_domains_import(genius_dir):
    shapes = {k: _import(genius_dir, k) for k in DOMAINS}
    assert len(shapes["energy"].issues) == 8
    assert [i.name for i in shapes["laptop"].issues] == ["Laptop", "Harddisk", "External Monitor"]
    assert not any(i.name.lower() == "price" for i in shapes["laptop"].issues + shapes["camera"].issues)
    assert shapes["itex"].issues[0].name == "Price" and shapes["itex"].issues[0].options[0] == "$4.37"
    assert shapes["laptop"].issues[2].options == ("19'' LCD", "20'' LCD", "23'' LCD")


def test_utilities_are_exactly_genius(genius_dir):
    s = _import(genius_dir, "laptop")
    w = [0.37808251708013424, 0.1767567099260568, 0.4452125771655631]  # from laptop_seller_utility.xml
    total = sum(w)
    # Macintosh (eval 3 of max 3), 60 Gb (2 of 3), 23'' LCD (1 of 3)
    expected = (w[0] * 1 + w[1] * 2 / 3 + w[2] * 1 / 3) / total
    outcome = s.outcome_from_names({"Laptop": "Macintosh", "Harddisk": "60 Gb", "External Monitor": "23'' LCD"})
    assert s.utility("seller", outcome) == pytest.approx(expected, abs=1e-12)
    # Camera: values normalised by the issue's largest evaluation (Maker: Pentax 500 is the top)
    cam = _import(genius_dir, "camera")
    assert cam.seller.values["Maker"]["Pentax"] == 1.0
    assert cam.seller.values["Maker"]["Sony"] == pytest.approx(300 / 500)
    assert cam.seller.weights["Maker"] == pytest.approx(0.08 / 1.00)  # seller weights 0.08 .. 0.07 sum to 1.00
    assert cam.buyer.weights["Maker"] == pytest.approx(0.34 / 1.00)


def test_reservation_and_discount_are_taken_or_recorded(genius_dir):
    itex = _import(genius_dir, "itex")
    assert itex.seller.reservation == pytest.approx(0.603307)
    assert itex.buyer.reservation == pytest.approx(0.718113)
    cam = _import(genius_dir, "camera")
    assert cam.source["seller"]["discount_factor"] == pytest.approx(0.890596104)
    lap = _import(genius_dir, "laptop")
    assert lap.seller.reservation == 0.0 and lap.source["seller"]["reservation_given"] is False


def test_turn_limit_and_context_come_from_flags(genius_dir):
    s = _import(genius_dir, "laptop", max_turns=14, context="a laptop with a monitor", scenario_id="lap")
    assert (s.max_turns, s.context, s.id) == (14, "a laptop with a monitor", "lap")
    default = _import(genius_dir, "camera")
    assert default.id == "genius-camera-camera_seller_utility-camera_buyer_utility"


def test_real_valued_price_is_refused_clearly(genius_dir, tmp_path):
    d = genius_dir / "2nd_hand_car"
    with pytest.raises(GeniusImportError, match=r"issue 'Price' is real-valued"):
        import_genius(d / "car_domain.xml", d / "car_dealer.xml", d / "car_buyer.xml")
    out = tmp_path / "car.jsonl"
    r = subprocess.run(
        [sys.executable, "-m", "haggler.cli", "scenarios", "import-genius", str(d / "car_domain.xml"),
         "--seller", str(d / "car_dealer.xml"), "--buyer", str(d / "car_buyer.xml"), "--out", str(out)],
        capture_output=True, text=True,
    )
    assert r.returncode == 2 and "real-valued" in r.stderr and "Traceback" not in r.stderr
    assert not out.exists()


def test_cli_import_appends(genius_dir, tmp_path):
    out = tmp_path / "g.jsonl"
    for key in DOMAINS:
        d, s, b = (str(genius_dir / p) for p in DOMAINS[key])
        r = subprocess.run([sys.executable, "-m", "haggler.cli", "scenarios", "import-genius", d, "--seller", s,
                            "--buyer", b, "--out", str(out), "--append", "--id", key], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
    assert set(load_scenarios(out)) == set(DOMAINS)


# ---- irregular files, written here so they need no shared data ----

DOMAIN = """<negotiation_template><utility_space number_of_issues="2">
 <objective index="0" name="Gadget" type="objective" etype="objective">
  <issue index="1" name="Price" etype="discrete" type="discrete" vtype="discrete">
   <item index="1" value="$1"/><item index="2" value="$2"/></issue>
  <issue index="2" name="Colour" etype="discrete" type="discrete" vtype="discrete">
   <item index="1" value="red"/><item index="2" value="blue"/><item index="3" value="green"/></issue>
 </objective></utility_space></negotiation_template>"""

PROFILE = """<utility_space>{reservation}
 <objective index="0" name="Gadget" type="objective" etype="objective">
  <weight index="1" value="{w1}"/>
  <weight index="2" value="2"/>
  <issue index="1" name="Price" type="discrete" etype="discrete">
   <item index="1" value="$1" evaluation="{e1}"/><item index="2" value="$2" evaluation="4"/></issue>
  <issue index="2" name="Colour" type="discrete" etype="discrete">
   <item index="1" value="red" evaluation="1"/><item index="2" value="blue" evaluation="2"/>
   <item index="3" value="green" evaluation="4"/></issue>
 </objective>{discount}</utility_space>"""


def _files(tmp_path, **kw):
    fields = {"reservation": '<reservation value="0.25"/>', "w1": "2", "e1": "1", "discount": ""} | kw
    (tmp_path / "d.xml").write_text(DOMAIN)
    (tmp_path / "p.xml").write_text(PROFILE.format(**fields))
    return tmp_path / "d.xml", tmp_path / "p.xml"


def test_irregular_but_valid_profile(tmp_path):
    d, p = _files(tmp_path)
    base = import_genius(d, p, p)
    assert base.seller.weights == {"Price": 0.5, "Colour": 0.5}
    assert base.seller.values["Colour"] == {"red": 0.25, "blue": 0.5, "green": 1.0}
    assert base.seller.reservation == 0.25
    # attributes in another order, stray whitespace, extra elements: same scenario
    text = p.read_text()
    text = text.replace('<weight index="1" value="2"/>', '<weight   value="2"\n   index="1" />')
    text = text.replace("</objective>", '<cost value="3"/><similarity_function type="binary" weight="1"/></objective>')
    text = text.replace('<item index="1" value="$1" evaluation="1"/>', '<item evaluation="1" cost="0" value="$1" index="1"> </item>')
    p.write_text(text)
    again = import_genius(d, p, p)
    assert (again.seller, again.buyer) == (base.seller, base.buyer)
    # missing reservation: 0, as in Genius, and said so
    d, p = _files(tmp_path, reservation="", discount='<discount_factor value="0.9"/>')
    s = import_genius(d, p, p)
    assert s.seller.reservation == 0.0 and s.source["seller"]["reservation_given"] is False
    assert s.source["seller"]["discount_factor"] == 0.9


@pytest.mark.parametrize(
    "kw, message",
    [
        ({"e1": "null"}, r"option '\$1' of issue 'Price' has evaluation='null', which is not a number"),
        ({"e1": "-1"}, r"negative evaluation"),
        ({"w1": "abc"}, r"weight of issue 'Price' has value='abc'"),
        ({"reservation": '<reservation value="1.5"/>'}, r"reservation value 1.5 is outside"),
    ],
)
def test_broken_profiles_fail_clearly(tmp_path, kw, message):
    d, p = _files(tmp_path, **kw)
    with pytest.raises(GeniusImportError, match=message) as err:
        import_genius(d, p, p)
    assert str(p) in str(err.value)


def test_structural_problems_fail_clearly(tmp_path):
    d, p = _files(tmp_path)
    text = p.read_text()
    p.write_text(text.replace('<weight index="2" value="2"/>', ""))
    with pytest.raises(GeniusImportError, match=re.escape("no <weight> with index '2' for issue 'Colour'")):
        import_genius(d, p, p)
    p.write_text(text.replace('<item index="3" value="green" evaluation="4"/>', ""))
    with pytest.raises(GeniusImportError, match=r"options differ from the domain's \(missing \['green'\]"):
        import_genius(d, p, p)
    p.write_text(text[:-30])
    with pytest.raises(GeniusImportError, match="not well-formed XML"):
        import_genius(d, p, p)
    with pytest.raises(GeniusImportError, match="no such file"):
        import_genius(tmp_path / "missing.xml", p, p)
