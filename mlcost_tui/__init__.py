"""mlcost-top, the Textual live view. It talks to mlcostd's API only (see DESIGN.md)."""
