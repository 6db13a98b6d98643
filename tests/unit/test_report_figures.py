"""``dlio_ckpt report``'s figures are for reading: everything the stragglers' heat map draws (its title, the
colour bar's label, axis and tick labels, the stragglers named) lies inside the figure, at least 0.02 in from its
edges, from one checkpoint of 2 processes to 10 of 1024 (run folders made through the real result writers:
tests/support/made_runs.py), in this process."""

from __future__ import annotations

import pytest

from tests.support.made_runs import make_run

EDGE = 0.02  # inches (2 pixels at report's 110 dpi) between what is drawn and the figure's edge: text touching it
# is cut by a pixel's antialiasing


def overflow(fig) -> list[str]:
    """Each side where what ``fig`` draws (matplotlib's own tight box: every drawn text and artist, tick labels
    out of view left out) comes closer than :data:`EDGE` to the figure's edge or runs off it, by how much (inches
    past the edge); empty where everything is inside."""
    fig.canvas.draw()
    drawn, page = fig.get_tightbbox(fig.canvas.get_renderer()), fig.bbox_inches
    sides = {"left": page.x0 - drawn.x0, "bottom": page.y0 - drawn.y0, "right": drawn.x1 - page.x1,
             "top": drawn.y1 - page.y1}
    return [f"{side}: {inches:+.3f} in" for side, inches in sides.items() if inches > -EDGE]


@pytest.mark.parametrize(("processes", "checkpoints"), [
    (2, 1), (4, 2), (64, 10),
    pytest.param(1024, 3, marks=pytest.mark.slow),  # 2-5 s making 1024 processes' files
])
def test_the_stragglers_figure_shows_all_its_text(tmp_path, processes, checkpoints):
    from dlio_ckpt.tools.readers.report import _pyplot, stragglers_figure
    from dlio_ckpt.tools.readers.runfiles import load_run

    run = make_run(tmp_path / "run", processes, checkpoints, stragglers={0: 1.8})
    fig = stragglers_figure(load_run(str(run)))
    try:
        assert overflow(fig) == []
        # and the title and label are there to be inside it
        texts = {t.get_text() for t in fig.findobj(lambda a: hasattr(a, "get_text"))}
        assert {"Stragglers: each process's duration\nrelative to the checkpoint's median",
                "duration / median of that checkpoint"} <= texts
        assert any(t.startswith("p0 (") for t in texts)  # the straggler named beside its row
    finally:
        _pyplot().close(fig)
