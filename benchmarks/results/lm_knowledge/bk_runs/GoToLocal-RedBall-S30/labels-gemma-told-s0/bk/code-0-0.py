import numpy as np
def potential(obs, caption):
    image = np.asarray(obs["
