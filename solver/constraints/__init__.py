"""One module per constraint family; each ``add_<family>(model, vars)`` states its formula."""
