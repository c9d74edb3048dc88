"""Where answers that outlive their connection are kept (decision P12): the store interface and
its implementations. Beside the engine, below serving; it knows no dialect: it keeps response
objects and numbered event frames as the dialect made them."""
