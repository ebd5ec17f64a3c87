"""The composition root: the twistd options (``tap``) and the node built
from them (``service``), the one place where adapters are chosen
(``adapters``) and parts are wired together."""
