"""A Celery app of a GPU transcription service, written without mlcost in mind: its worker
loads the model onto the GPU once (at the worker's start, or in each pool process) and runs
`transcribe` tasks that producers send through a redis broker.

    celery -b redis://HOST:PORT/0 -A celery_gpu_app worker --pool=solo

Between tasks the worker waits for the broker's next message.
"""

import os

import _gpu
from celery import Celery
from celery.signals import worker_process_init

from daemon.sim.device import Device

app = Celery("transcribe")  # the broker: `celery -b redis://HOST:PORT/0 ...`
app.conf.update(worker_hijack_root_logger=False, broker_connection_retry_on_startup=True,
                worker_send_task_events=False, task_ignore_result=True)
_model: list[Device] = []  # the model's device, once loaded

GPU = int(os.environ.get("MLCOST_SIM_GPUS", "0").split(",")[0])


def _load_model() -> None:
    dev = _gpu.attach(GPU)
    dev.alloc(10 << 30)  # the model's weights
    _model.append(dev)
    _gpu.ready()


@worker_process_init.connect
def _load_at_start(**_kwargs) -> None:
    _load_model()  # where the tasks run: the worker itself (solo), or each pool process


@app.task
def transcribe(clip: str) -> dict:
    _model[0].kernel(0.3, sm=0.8)
    return {"clip": clip, "words": 120}
