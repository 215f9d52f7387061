"""A real IPython kernel driven through jupyter_client, as a frontend drives one."""
