"""The results panel a tab's long job fills (Compare, Tune): its status line, where progress shows, a table, and
two charts side by side. One builder, so the tabs lay out and name their results alike (`pg-<tab>-status`,
`pg-<tab>-table`, `pg-<tab>-<chart>`)."""

from __future__ import annotations

from dataclasses import dataclass

import gradio as gr


@dataclass
class ResultsPanel:
    status: gr.HTML
    table: gr.HTML
    left: gr.Plot
    right: gr.Plot


def results_panel(tab: str, idle_status: str, charts: tuple[str, str]) -> ResultsPanel:
    """Build the panel (call inside the tab): `idle_status` is the status HTML before the first run, `charts` the
    two charts' names in their element ids."""
    status = gr.HTML(idle_status, elem_id=f"pg-{tab}-status")
    table = gr.HTML("", elem_id=f"pg-{tab}-table")
    with gr.Row():
        left = gr.Plot(show_label=False, elem_id=f"pg-{tab}-{charts[0]}")
        right = gr.Plot(show_label=False, elem_id=f"pg-{tab}-{charts[1]}")
    return ResultsPanel(status, table, left, right)
