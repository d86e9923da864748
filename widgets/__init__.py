"""ipywidgets views of imcmc-lab move records and chains."""
