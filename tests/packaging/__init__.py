"""The packaging check: hostkit as a user gets it, a wheel installed outside the checkout."""
