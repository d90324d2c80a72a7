-- the MLflow backend store beside Prefect's database, and the store of MLflow's users and
-- permissions (`mlflow server --app-name basic-auth`; compose.yaml)
CREATE DATABASE mlflow;
CREATE DATABASE mlflow_auth;
